// The collective ops of a sharded step (graph/spmd.hpp puts them where placements change): each
// runs one collective on the device's group along a mesh axis (graph/collectives.hpp), named by
// the "group" attribute. An optional second input is the device's previous collective, read only
// so that every device runs its collectives in one order. They come after autodiff and have no
// gradients; graph passes never remove or merge them (side effects: the peers wait for them).
#include <map>
#include <mutex>

#include "op_helpers.hpp"
#include "troupe/graph/collectives.hpp"
#include "troupe/graph/spmd.hpp"
#include "troupe/kernels/layout.hpp"

namespace troupe::graph {

namespace {

std::mutex registry_mutex;
std::map<int, std::shared_ptr<CollectiveGroup>>& registry() {
  static std::map<int, std::shared_ptr<CollectiveGroup>> groups;
  return groups;
}
int next_id = 1;

}  // namespace

GroupRegistration::GroupRegistration(std::shared_ptr<CollectiveGroup> group) : group_(std::move(group)) {
  TROUPE_CHECK(group_ != nullptr, invalid_argument, "GroupRegistration: the group is null");
  const std::lock_guard<std::mutex> lock(registry_mutex);
  id_ = next_id++;
  registry()[id_] = group_;
}

GroupRegistration::~GroupRegistration() {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  registry().erase(id_);
}

std::shared_ptr<CollectiveGroup> collective_group(int id) {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = registry().find(id);
  TROUPE_CHECK(it != registry().end(), invalid_argument, "collective group ", id,
               " is not registered: a sharded step ran after its device's groups were released");
  return it->second;
}

namespace {
using namespace detail;

// The input's info with its split dim (attributes "dim", "parts") multiplied (all_gather) or divided.
std::vector<ValueInfo> infer_resized(const InferContext& c, bool gather) {
  expect_arity(c, 1, 2);
  SymShape s = c.inputs[0].shape;
  const int dim = axis_of(c, c.attrs.get_int("dim"), s.size());
  const std::int64_t parts = c.attrs.get_int("parts"), blocks = c.attrs.get_int("blocks");
  SymDim& d = s[static_cast<std::size_t>(dim)];
  if (gather) {
    d = d * SymDim(parts);
  } else {
    const std::optional<SymDim> q = d.divide(SymDim(parts * blocks));
    if (!q) shape_error(c, "dim " + std::to_string(dim) + " does not split into " + std::to_string(blocks) + " blocks of " +
                               std::to_string(parts) + " equal parts");
    d = *q * SymDim(blocks);
  }
  return one(c.inputs[0].dtype, s);
}

std::vector<ValueInfo> infer_all_reduce(const InferContext& c) {
  expect_arity(c, 1, 2);
  expect_floating(c, 0);
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}

int int_attr(const ComputeContext& c, const char* name) { return static_cast<int>(c.attrs.get_int(name)); }

// Runs `f` on the node's group; a failure names the op and the group.
template <class F>
Tensor on_group(const char* op, const ComputeContext& c, F&& f) {
  const std::shared_ptr<CollectiveGroup> group = collective_group(int_attr(c, "group"));
  try {
    return f(*group);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(op) + " on " + group->name() + ": " + e.message());
  }
}

std::vector<Tensor> compute_all_reduce(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {on_group("all_reduce", c, [&](CollectiveGroup& g) {
    Tensor sum = in[0].clone();
    g.all_reduce(sum);
    return sum;
  })};
}

std::vector<Tensor> compute_all_gather(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {on_group("all_gather", c, [&](CollectiveGroup& g) {
    return gather_block_slices(g, in[0], int_attr(c, "dim"), int_attr(c, "blocks"));
  })};
}

std::vector<Tensor> compute_reduce_scatter(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {on_group("reduce_scatter", c, [&](CollectiveGroup& g) {
    const int parts = int_attr(c, "parts"), dim = int_attr(c, "dim"), blocks = int_attr(c, "blocks");
    // Device r's part, flattened, at r's place in one buffer: the ring hands each its own.
    std::vector<Tensor> flat;
    for (int r = 0; r < parts; ++r) {
      const Tensor piece = block_slice(in[0], dim, blocks, parts, r).contiguous();
      flat.push_back(piece.reshape({piece.numel()}));
    }
    return g.reduce_scatter(kernels::concat(flat, 0)).reshape(c.output_shapes[0]);
  })};
}

std::vector<Tensor> compute_local_shard(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {block_slice(in[0], int_attr(c, "dim"), int_attr(c, "blocks"), int_attr(c, "parts"), int_attr(c, "index"))};
}

}  // namespace

// x summed over the group's devices (a partial sum made whole).
TROUPE_DEFINE_OP({.name = "all_reduce", .infer = infer_all_reduce, .compute = compute_all_reduce, .no_grad_inputs = {0, 1},
                  .side_effects = true, .collective = true});
// The devices' slices of x ("dim" in "blocks", "parts" devices) joined into the whole value.
TROUPE_DEFINE_OP({.name = "all_gather", .infer = [](const InferContext& c) { expect_floating(c, 0); return infer_resized(c, true); },
                  .compute = compute_all_gather, .no_grad_inputs = {0, 1}, .side_effects = true, .collective = true});
// x summed over the group's devices, of which each keeps its slice.
TROUPE_DEFINE_OP({.name = "reduce_scatter", .infer = [](const InferContext& c) { expect_floating(c, 0); return infer_resized(c, false); },
                  .compute = compute_reduce_scatter, .no_grad_inputs = {0, 1}, .side_effects = true, .collective = true});
// Device "index"'s slice of a whole x: a split made without communication.
TROUPE_DEFINE_OP({.name = "local_shard", .infer = [](const InferContext& c) { return infer_resized(c, false); },
                  .compute = compute_local_shard, .no_grad_inputs = {0}});

}  // namespace troupe::graph
