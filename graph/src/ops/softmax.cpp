// The softmax family: softmax and log_softmax along an axis, each with its backward op, which
// reads (dy, y).
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

}  // namespace troupe::graph
