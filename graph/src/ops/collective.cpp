// The collective ops of a sharded step (graph/spmd.hpp puts them where placements change): each
// runs one collective on the device's group along a mesh axis (graph/collectives.hpp), named by
// the "group" attribute, as a call in three parts (OpDef::collective) so the runtime never waits
// for the wire. An optional second input is the device's previous collective, read only
// so that every device runs its collectives in one order. They come after autodiff and have no
// gradients; graph passes never remove or merge them (side effects: the peers wait for them).
#include <future>
#include <map>
#include <mutex>

#include "collective_call.hpp"
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

void run_on(CollectiveGroup& group, const std::function<void(CollectiveWire&)>& work) {
  auto over = std::make_shared<std::promise<void>>();
  std::future<void> done = over->get_future();
  group.submit(work, [over](std::exception_ptr e) {
    if (e) over->set_exception(e);
    else over->set_value();
  });
  done.get();
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

// Low-precision values (mixed precision's bf16 activations) are summed in f32 and rounded once.
bool low_precision(const Tensor& t) { return t.dtype() == DType::bf16 || t.dtype() == DType::f16; }

// The sum in f32 or f64 (a low-precision input's copy), and the output's dtype.
struct Summed {
  Tensor sum;
  DType dtype = DType::f32;
};

CollectiveCall start_all_reduce(const std::vector<Tensor>& in, const ComputeContext& c) {
  return call_on_group(
      "all_reduce", c, Summed{low_precision(in[0]) ? in[0].to(DType::f32) : in[0].clone(), in[0].dtype()},
      [](CollectiveWire& w, const Summed& s) { w.all_reduce(s.sum); },
      [](Summed s) { return std::vector<Tensor>{s.sum.to(s.dtype)}; });
}

// This device's piece, flattened to one row, and every device's rows once gathered.
struct Gathered {
  Tensor piece, all;
};

CollectiveCall start_all_gather(const std::vector<Tensor>& in, const ComputeContext& c) {
  const int dim = int_attr(c, "dim"), blocks = int_attr(c, "blocks");
  const Tensor dense = in[0].contiguous();
  return call_on_group(
      "all_gather", c, Gathered{dense.reshape({1, dense.numel()}), Tensor()},
      [](CollectiveWire& w, Gathered& s) { s.all = w.all_gather(s.piece); },
      [shape = dense.shape(), dim, blocks](Gathered s) {
        return std::vector<Tensor>{join_gathered_rows(s.all, shape, dim, blocks)};
      });
}

CollectiveCall start_reduce_scatter(const std::vector<Tensor>& in, const ComputeContext& c) {
  const int parts = int_attr(c, "parts"), dim = int_attr(c, "dim"), blocks = int_attr(c, "blocks");
  // Device r's part, flattened, at r's place in one buffer: the ring hands each its own.
  std::vector<Tensor> flat;
  for (int r = 0; r < parts; ++r) {
    const Tensor piece = block_slice(in[0], dim, blocks, parts, r).contiguous();
    flat.push_back(piece.reshape({piece.numel()}));
  }
  const Tensor whole = kernels::concat(flat, 0);
  return call_on_group(
      "reduce_scatter", c, Summed{low_precision(whole) ? whole.to(DType::f32) : whole, whole.dtype()},
      [](CollectiveWire& w, Summed& s) { s.sum = w.reduce_scatter(s.sum); },
      [shape = c.output_shapes[0]](Summed s) { return std::vector<Tensor>{s.sum.to(s.dtype).reshape(shape)}; });
}

std::vector<Tensor> compute_local_shard(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {block_slice(in[0], int_attr(c, "dim"), int_attr(c, "blocks"), int_attr(c, "parts"), int_attr(c, "index"))};
}

}  // namespace

// x summed over the group's devices (a partial sum made whole).
TROUPE_DEFINE_OP({.name = "all_reduce", .infer = infer_all_reduce, .collective = start_all_reduce, .no_grad_inputs = {0, 1},
                  .side_effects = true});
// The devices' slices of x ("dim" in "blocks", "parts" devices) joined into the whole value.
TROUPE_DEFINE_OP({.name = "all_gather", .infer = [](const InferContext& c) { expect_floating(c, 0); return infer_resized(c, true); },
                  .collective = start_all_gather, .no_grad_inputs = {0, 1}, .side_effects = true});
// x summed over the group's devices, of which each keeps its slice.
TROUPE_DEFINE_OP({.name = "reduce_scatter", .infer = [](const InferContext& c) { expect_floating(c, 0); return infer_resized(c, false); },
                  .collective = start_reduce_scatter, .no_grad_inputs = {0, 1}, .side_effects = true});
// Device "index"'s slice of a whole x: a split made without communication.
TROUPE_DEFINE_OP({.name = "local_shard", .infer = [](const InferContext& c) { return infer_resized(c, false); },
                  .compute = compute_local_shard, .no_grad_inputs = {0}});

}  // namespace troupe::graph
