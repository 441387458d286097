// The convolution family: conv2d with its backward ops (data, weight, bias), and conv2d_residual
// (a residual add fused into the convolution).
#include "op_helpers.hpp"
#include "troupe/kernels/conv.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

// (conv2d's optional 0/1 attributes, read with get_flag, are set by level-3 passes.)
// Two operations per element of `per` (an output, or the incoming gradient) and weight tap (the
// weight's [Cin, kh, kw], its dims 1 to 3); a blocked weight counts the elements touched.
double conv_taps_cost(const CostContext& c, const Shape& per, const Shape& w) {
  if (w.size() != 4) return elements_touched(c);
  return 2 * static_cast<double>(shape_numel(per)) * static_cast<double>(w[1] * w[2] * w[3]);
}
// conv2d (weight input 1) and conv2d_residual (weight input 2).
template <int Weight>
double conv_cost(const CostContext& c) { return conv_taps_cost(c, c.outputs[0], c.inputs[Weight]); }
// (grad, w, like) -> dx: every gradient element meets every tap of w.
double conv_backward_data_cost(const CostContext& c) { return conv_taps_cost(c, c.inputs[0], c.inputs[1]); }
// (grad, x, like) -> dw [Cout, Cin, kh, kw]: every gradient element meets every tap of dw.
double conv_backward_weight_cost(const CostContext& c) { return conv_taps_cost(c, c.inputs[0], c.outputs[0]); }
kernels::Conv2dParams conv_params(const Attrs& a) {
  const auto s = a.get_int("stride"), p = a.get_int("padding");
  return kernels::Conv2dParams{s, s, p, p, get_flag(a, "relu"), get_flag(a, "blocked_input"),
                               get_flag(a, "blocked_output"), get_flag(a, "winograd")};
}
// [N, C/16, H, W, 16] <-> [N, C, H, W] for symbolic shapes (the channel count is always fixed).
SymShape unblocked(const InferContext& c, const SymShape& x) {
  if (x.size() != 5 || x[4] != SymDim(kernels::kChannelBlock) || !x[1].is_static())
    shape_error(c, "a channel-blocked input must be [N, C/16, H, W, 16]");
  return {x[0], SymDim(x[1].size() * kernels::kChannelBlock), x[2], x[3]};
}
SymShape blocked(const InferContext& c, const SymShape& y) {
  if (!y[1].is_static() || y[1].size() % kernels::kChannelBlock != 0)
    shape_error(c, "a channel-blocked output needs a channel count divisible by 16");
  return {y[0], SymDim(y[1].size() / kernels::kChannelBlock), y[2], y[3], SymDim(kernels::kChannelBlock)};
}
// Output size of one spatial dim; symbolic sizes are allowed only where the output equals the input.
SymDim conv_out(const InferContext& c, const SymDim& in, const SymDim& k, std::int64_t stride, std::int64_t pad) {
  if (!k.is_static()) shape_error(c, "the kernel size must be fixed");
  if (in.is_static()) {
    const std::int64_t o = (in.size() + 2 * pad - k.size()) / stride + 1;
    if (in.size() + 2 * pad < k.size()) shape_error(c, "the padded input is smaller than the kernel");
    return o;
  }
  if (stride == 1 && 2 * pad == k.size() - 1) return in;
  shape_error(c, "a symbolic spatial size (" + in.str() + ") needs stride 1 and 'same' padding");
}
std::vector<ValueInfo> infer_conv2d(const InferContext& c) {
  expect_arity(c, 2, 3);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  const bool blocked_in = get_flag(c.attrs, "blocked_input"), blocked_out = get_flag(c.attrs, "blocked_output");
  if (!blocked_in) expect_rank(c, 0, 4, "x [N, C, H, W]");
  expect_rank(c, 1, 4, "w [O, C, kh, kw]");
  const SymShape x = blocked_in ? unblocked(c, c.inputs[0].shape) : c.inputs[0].shape;
  const SymShape& w = c.inputs[1].shape;
  if (x[1] != w[1]) shape_error(c, "input channels " + x[1].str() + " differ from the weight's " + w[1].str());
  const DType y_dtype = product_dtype(c);
  if (c.inputs.size() == 3) {
    if (c.inputs[2].dtype != y_dtype) shape_error(c, std::string("bias must have the result's dtype, ") + dtype_name(y_dtype));
    if (c.inputs[2].shape != SymShape{w[0]}) shape_error(c, "bias must have shape [" + w[0].str() + "]");
  }
  const auto s = c.attrs.get_int("stride"), p = c.attrs.get_int("padding");
  if (s < 1 || p < 0) shape_error(c, "stride must be >= 1 and padding >= 0");
  const SymShape y{x[0], w[0], conv_out(c, x[2], w[2], s, p), conv_out(c, x[3], w[3], s, p)};
  return one(y_dtype, blocked_out ? blocked(c, y) : y);
}
std::vector<Var> grad_conv2d(const GradContext& c) {
  // With a relu epilogue (conv-relu fusion), the output is positive exactly where the conv's was.
  const bool relu = get_flag(c.attrs, "relu");
  if (get_flag(c.attrs, "blocked_input") || get_flag(c.attrs, "blocked_output") || get_flag(c.attrs, "winograd"))
    fail(ErrorKind::unsupported, "conv2d with a channel-blocked layout or Winograd has no gradient: both are chosen "
         "for inference graphs only (TracedFunction::for_inference)");
  const Var dy = relu ? relu_backward(c.grad_output(0), c.outputs[0], 0.0) : c.grad_output(0);
  // The operands' gradients come in the operands' dtype (bf16 under mixed precision), so dy joins
  // them in it: one cast both share. The bias's gradient sums dy as it is.
  const Var dy_low = cast(dy, c.inputs[0].dtype());
  std::vector<Var> g(c.inputs.size());
  if (c.needs_grad[0]) g[0] = apply1("conv2d_backward_data", {dy_low, c.inputs[1], c.inputs[0]}, c.attrs);
  if (c.needs_grad[1]) g[1] = apply1("conv2d_backward_weight", {dy_low, c.inputs[0], c.inputs[1]}, c.attrs);
  if (c.inputs.size() == 3 && c.needs_grad[2]) g[2] = apply1("conv2d_backward_bias", {dy});
  return g;
}
std::vector<Tensor> compute_conv2d(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::conv2d(in[0], in[1], in.size() == 3 ? in[2] : Tensor(), conv_params(c.attrs), c.output_dtypes[0])};
}
// (grad, other operand, like): the result has the shape of `like`, the operand being differentiated.
std::vector<ValueInfo> infer_conv_backward(const InferContext& c) {
  expect_arity(c, 3, 3);
  return one(c.inputs[0].dtype, c.inputs[2].shape);
}
std::vector<Tensor> compute_conv2d_backward_data(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::conv2d_backward_data(in[0], in[1], c.output_shapes[0], conv_params(c.attrs))};
}
std::vector<Tensor> compute_conv2d_backward_weight(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::conv2d_backward_weight(in[0], in[1], c.output_shapes[0], conv_params(c.attrs))};
}
std::vector<ValueInfo> infer_conv2d_backward_bias(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_rank(c, 0, 4, "grad [N, O, H, W]");
  return one(c.inputs[0].dtype, {c.inputs[0].shape[1]});
}
std::vector<Tensor> compute_conv2d_backward_bias(const std::vector<Tensor>& in, const ComputeContext&) {
  return {kernels::conv2d_backward_bias(in[0])};
}
}  // namespace
// compute: kernels::conv2d (oneDNN or im2col + GEMM); each backward op's input 2 gives only a shape.
// Attribute relu=1 (set by conv-relu fusion) adds a relu epilogue.
Var conv2d(const Var& x, const Var& w, const Var& bias, std::int64_t stride, std::int64_t padding) {
  return apply1("conv2d", {x, w, bias}, Attrs().set("stride", stride).set("padding", padding));
}
Var conv2d(const Var& x, const Var& w, std::int64_t stride, std::int64_t padding) {
  return apply1("conv2d", {x, w}, Attrs().set("stride", stride).set("padding", padding));
}
TROUPE_DEFINE_OP({.name = "conv2d", .infer = infer_conv2d, .cost = conv_cost<1>, .compute = compute_conv2d, .grad = grad_conv2d,
                  .autocast_inputs = {0, 1}});
TROUPE_DEFINE_OP({.name = "conv2d_backward_data", .infer = infer_conv_backward, .cost = conv_backward_data_cost, .compute = compute_conv2d_backward_data,
                  .no_grad_inputs = {2}});
TROUPE_DEFINE_OP({.name = "conv2d_backward_weight", .infer = infer_conv_backward, .cost = conv_backward_weight_cost,
                  .compute = compute_conv2d_backward_weight, .no_grad_inputs = {2}});
TROUPE_DEFINE_OP({.name = "conv2d_backward_bias", .infer = infer_conv2d_backward_bias,
                  .compute = compute_conv2d_backward_bias});

namespace {
std::vector<ValueInfo> infer_conv2d_residual(const InferContext& c) {
  expect_arity(c, 3, 4);
  const std::vector<ValueInfo> conv_inputs(c.inputs.begin() + 1, c.inputs.end());
  const std::vector<ValueInfo> out = infer_conv2d(InferContext{c.op, conv_inputs, c.attrs, c.target});
  if (c.inputs[0].dtype != out[0].dtype || c.inputs[0].shape != out[0].shape)
    shape_error(c, "the residual must have the output's dtype and shape " + sym_shape_str(out[0].shape));
  return out;
}
}  // namespace
// conv2d_residual(r, x, w[, b]) = conv2d(x, w[, b]) + r, conv2d's attributes: the residual add fused
// into the convolution by conv-residual fusion (level 3, inference graphs; no gradient). Output 0
// may be written over r when r dies there; the kernel adds the convolution to it.
TROUPE_DEFINE_OP({.name = "conv2d_residual", .infer = infer_conv2d_residual, .cost = conv_cost<2>, .kernel = "conv2d_residual",
                  .in_place = true, .in_place_input = 0});

}  // namespace troupe::graph
