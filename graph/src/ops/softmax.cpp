// The softmax family: softmax and log_softmax along an axis, and the causal softmax of attention
// scores, each with its backward op, which reads (dy, y).
#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/softmax.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

std::vector<ValueInfo> infer_softmax(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  axis_of(c, c.attrs.get_int("axis"), c.inputs[0].shape.size());
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}

template <Tensor (*F)(const Tensor&, std::int64_t)>
std::vector<Tensor> compute_axis(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {F(in[0], c.attrs.get_int("axis"))};
}
template <Tensor (*F)(const Tensor&, const Tensor&, std::int64_t)>
std::vector<Tensor> compute_axis_backward(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {F(in[0], in[1], c.attrs.get_int("axis"))};
}
// Softmax gradients need only the output y, so the backward op reads (grad, y).
GradFn axis_grad(const char* backward) {
  return [backward](const GradContext& c) -> std::vector<Var> {
    return {apply1(backward, {c.grad_output(0), c.outputs[0]}, c.attrs)};
  };
}
}  // namespace
// compute: kernels::softmax / log_softmax; the backward ops read (dy, y).
Var softmax(const Var& x, std::int64_t axis) { return apply1("softmax", {x}, Attrs().set("axis", axis)); }
TROUPE_DEFINE_OP({.name = "softmax", .infer = infer_softmax, .sharding = shard_all_but_axis, .compute = compute_axis<kernels::softmax>,
                  .grad = axis_grad("softmax_backward"), .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "softmax_backward", .infer = infer_grad_pair, .sharding = shard_all_but_axis,
                  .compute = compute_axis_backward<kernels::softmax_backward>});
Var log_softmax(const Var& x, std::int64_t axis) { return apply1("log_softmax", {x}, Attrs().set("axis", axis)); }
TROUPE_DEFINE_OP({.name = "log_softmax", .infer = infer_softmax, .sharding = shard_all_but_axis, .compute = compute_axis<kernels::log_softmax>,
                  .grad = axis_grad("log_softmax_backward"), .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "log_softmax_backward", .infer = infer_grad_pair, .sharding = shard_all_but_axis,
                  .compute = compute_axis_backward<kernels::log_softmax_backward>});

namespace {
// causal_softmax(x) {scale}: [..., T, T] scores, the same shape and dtype out.
std::vector<ValueInfo> infer_causal_softmax(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  const SymShape& s = c.inputs[0].shape;
  if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2]) shape_error(c, "the last two dims must be square (queries x keys)");
  return one(c.inputs[0].dtype, s);
}
std::vector<Tensor> compute_causal_softmax(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::causal_softmax(in[0], c.attrs.get_double("scale"))};
}
std::vector<Tensor> compute_causal_softmax_backward(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::causal_softmax_backward(in[0], in[1], c.attrs.get_double("scale"))};
}
// Sharding: each [queries, keys] square stays whole; batch and head dims split (the backward's
// gradient and y alike).
std::vector<ShardSignature> shard_causal_softmax(const ShardContext& c) { return shard_rows(c, 2, 1); }
std::vector<ShardSignature> shard_causal_softmax_backward(const ShardContext& c) { return shard_rows(c, 2, 2); }
}  // namespace
// compute: kernels::causal_softmax; the backward op reads (dy, y), as softmax's does.
Var causal_softmax(const Var& x, double scale) { return apply1("causal_softmax", {x}, Attrs().set("scale", scale)); }
TROUPE_DEFINE_OP({.name = "causal_softmax", .infer = infer_causal_softmax, .sharding = shard_causal_softmax,
                  .compute = compute_causal_softmax, .grad = axis_grad("causal_softmax_backward"),
                  .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "causal_softmax_backward", .infer = infer_grad_pair, .sharding = shard_causal_softmax_backward,
                  .compute = compute_causal_softmax_backward});

}  // namespace troupe::graph
