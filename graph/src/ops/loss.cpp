// The losses: cross_entropy with its backward op and their sharding rules (vocab-parallel among
// them), and mse_loss, built from other ops.
#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/loss.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

// cross_entropy(logits[..., C], targets[...]): the kernels take rows, so leading dims are flattened.
std::vector<ValueInfo> infer_cross_entropy(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  expect_integer(c, 1);
  const SymShape& l = c.inputs[0].shape;
  if (l.empty() || SymShape(l.begin(), l.end() - 1) != c.inputs[1].shape)
    shape_error(c, "expected logits [..., classes] and targets [...] with the same leading dims");
  return one(accumulation_dtype(c.inputs[0].dtype), {});
}
std::vector<Tensor> compute_cross_entropy(const std::vector<Tensor>& in, const ComputeContext&) {
  return {kernels::cross_entropy(rows_of(in[0]), flat(in[1]))};
}
std::vector<Var> grad_cross_entropy(const GradContext& c) {
  return {apply1("cross_entropy_backward", {c.grad_output(0), c.inputs[0], c.inputs[1]}), Var()};
}
std::vector<ValueInfo> infer_cross_entropy_backward(const InferContext& c) {
  expect_arity(c, 3, 3);
  return one(c.inputs[1].dtype, c.inputs[1].shape);
}
std::vector<Tensor> compute_cross_entropy_backward(const std::vector<Tensor>& in, const ComputeContext&) {
  const Tensor g = kernels::cross_entropy_backward(in[0], rows_of(in[1]), flat(in[2]));
  return {g.view(in[1].shape())};
}
// Sharding of cross_entropy (logits [..., classes], targets [...]): rows split alike give each
// device the mean over its rows, scaled to its share of the mean over all (mean_of_split); the
// classes split give every device the whole loss, the devices exchanging each row's maximum and
// sums (vocab-parallel: the logits are never gathered).
std::vector<ShardSignature> shard_cross_entropy(const ShardContext& c) {
  const int classes = static_cast<int>(c.inputs[0].shape.size()) - 1;
  std::vector<ShardSignature> out;
  for (int d = 0; d < classes; ++d) {
    const Placement split = Placement::split(d);
    out.push_back({{split, split}, {Placement::partial_sum()}, true});
  }
  if (classes >= 0 && c.inputs[0].shape.back().is_static())
    out.push_back({{Placement::split(classes), Placement::broadcast()}, {Placement::broadcast()}, false,
                   expand_vocab_cross_entropy, 2});
  return out;
}
// Sharding of cross_entropy_backward (dloss, logits, targets): rows split alike, each device's
// gradient divided by its own row count, so scaled to its share (mean_of_split); linear in dloss;
// the classes split give the gradient's columns alike (vocab-parallel).
std::vector<ShardSignature> shard_cross_entropy_backward(const ShardContext& c) {
  const Placement B = Placement::broadcast(), P = Placement::partial_sum();
  const int classes = static_cast<int>(c.inputs[1].shape.size()) - 1;
  std::vector<ShardSignature> out;
  for (int d = 0; d < classes; ++d) {
    const Placement split = Placement::split(d);
    out.push_back({{B, split, split}, {split}, true});
  }
  out.push_back({{P, B, B}, {P}});
  if (classes >= 0 && c.inputs[1].shape.back().is_static())
    out.push_back({{B, Placement::split(classes), B}, {Placement::split(classes)}, false, expand_vocab_cross_entropy_backward, 2});
  return out;
}
}  // namespace
// compute: kernels::cross_entropy over the rows of the flattened logits; targets take no gradient.
Var cross_entropy(const Var& logits, const Var& targets) { return apply1("cross_entropy", {logits, targets}); }
TROUPE_DEFINE_OP({.name = "cross_entropy", .infer = infer_cross_entropy, .sharding = shard_cross_entropy, .compute = compute_cross_entropy,
                  .grad = grad_cross_entropy, .no_grad_inputs = {1}, .host_reads = true, .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "cross_entropy_backward", .infer = infer_cross_entropy_backward, .sharding = shard_cross_entropy_backward,
                  .compute = compute_cross_entropy_backward, .no_grad_inputs = {2}, .host_reads = true});

// Built from other ops: mean((y - target)^2).
Var mse_loss(const Var& y, const Var& target) {
  const Var d = y - target;
  return mean(d * d);
}

}  // namespace troupe::graph
