// The random family: dropout's mask, drawn by counter from the run's position (ComputeContext's
// random) and the node's site; a shard of it draws what the whole tensor's mask holds there.
#include "troupe/graph/dropout.hpp"

#include "op_helpers.hpp"
#include "troupe/graph/ops.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

thread_local kernels::RandomPosition t_position;

// dropout_mask(x) -> factors of x's shape and dtype, 0 or 1 / (1 - p); attrs p, site and shard
// (the node's index along dims 0 and 1 among equal slices of the whole tensor; spmd sets it).
std::vector<ValueInfo> infer_dropout_mask(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  if (c.inputs[0].shape.empty()) shape_error(c, "dropout needs a tensor of rank 1 or more (dim 0: the batch's rows)");
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}
std::vector<Tensor> compute_dropout_mask(const std::vector<Tensor>& in, const ComputeContext& c) {
  const Shape& shape = in[0].shape();
  const std::vector<std::int64_t>& shard = c.attrs.get_ints("shard");
  return {kernels::dropout_mask(shape, in[0].dtype(), c.attrs.get_double("p"),
                                static_cast<std::uint64_t>(c.attrs.get_int("site")), c.random, shard[0] * shape[0],
                                shape.size() > 1 ? shard[1] * shape[1] : 0)};
}
// Split along the batch's rows or dim 1 (attention's heads), where the shard index places the
// slice; a split of the dims after would need the whole tensor's shape.
std::vector<ShardSignature> shard_dropout_mask(const ShardContext& c) {
  std::vector<ShardSignature> out;
  for (int d = 0; d < 2 && static_cast<std::size_t>(d) < c.inputs[0].shape.size(); ++d)
    out.push_back({{Placement::split(d)}, {Placement::split(d)}});
  return out;
}
}  // namespace

std::uint64_t dropout_site(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

Var dropout(const Var& x, double p, const std::string& name) {
  if (p == 0) return x;
  const Attrs attrs = Attrs()
                          .set("p", p)
                          .set("site", static_cast<std::int64_t>(dropout_site(name)))
                          .set("shard", std::vector<std::int64_t>{0, 0});
  return x * apply1("dropout_mask", {x}, attrs, {}, name);
}
// No gradient flows into the mask: x's gradient comes through the product.
TROUPE_DEFINE_OP({.name = "dropout_mask", .infer = infer_dropout_mask, .sharding = shard_dropout_mask,
                  .compute = compute_dropout_mask, .no_grad_inputs = {0}});

const kernels::RandomPosition& eager_random_position() { return t_position; }

RandomScope::RandomScope(const kernels::RandomPosition& at) : previous_(t_position) { t_position = at; }
RandomScope::~RandomScope() { t_position = previous_; }

}  // namespace troupe::graph
