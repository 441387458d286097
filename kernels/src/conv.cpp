// The convolution front ends: dtype and geometry checks, dense operands, dispatch. The bias
// gradient is a sum, so it has no kernel of its own.
#include "troupe/kernels/conv.hpp"

#include "conv_geometry.hpp"
#include "float_checks.hpp"
#include "troupe/kernels/matmul.hpp"
#include "troupe/kernels/reduce.hpp"

namespace troupe::kernels {

Shape channel_blocked_shape(const Shape& nchw) {
  TROUPE_CHECK(nchw.size() == 4 && nchw[1] % kChannelBlock == 0, shape_mismatch, "channel blocks: ", shape_str(nchw),
               " is not NCHW with a channel count divisible by ", kChannelBlock);
  return {nchw[0], nchw[1] / kChannelBlock, nchw[2], nchw[3], kChannelBlock};
}

Shape channel_unblocked_shape(const Shape& blocked) {
  TROUPE_CHECK(blocked.size() == 5 && blocked[4] == kChannelBlock, shape_mismatch, "channel blocks: ",
               shape_str(blocked), " is not [N, C/", kChannelBlock, ", H, W, ", kChannelBlock, "]");
  return {blocked[0], blocked[1] * kChannelBlock, blocked[2], blocked[3]};
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, std::optional<DType> out_dtype) {
  check_float("conv2d", "input", x, true);
  check_float_like("conv2d", "weight", w, "input", x, true);
  const DType y_dtype = product_dtype("conv2d", x.dtype(), out_dtype);
  TROUPE_CHECK(!(p.blocked_input || p.blocked_output) || x.dtype() == DType::f32 || x.dtype() == DType::bf16,
               unsupported, "conv2d: channel-blocked layouts are f32 and bf16 only, got ", x.str());
  const Shape x_shape = p.blocked_input ? channel_unblocked_shape(x.shape()) : x.shape();
  const ConvGeometry g = conv_geometry("conv2d", x_shape, w.shape(), p);
  if (bias.defined()) {
    TROUPE_CHECK(bias.dtype() == y_dtype, dtype_mismatch, "conv2d: the bias ", bias.str(),
                 " must have the result's dtype, ", dtype_name(y_dtype));
    TROUPE_CHECK(bias.shape() == Shape{g.o}, shape_mismatch, "conv2d: bias ", shape_str(bias.shape()), " must be [",
                 g.o, "]");
  }
  const Shape y_shape = p.blocked_output ? channel_blocked_shape(g.output_shape()) : g.output_shape();
  std::vector<Tensor> out{Tensor::empty(y_shape, y_dtype, x.device())};
  std::vector<Tensor> in{x.contiguous(), w.contiguous()};
  if (bias.defined()) in.push_back(bias.contiguous());
  dispatch("conv2d", in, out, conv_geometry_attrs(x_shape, w.shape(), p));
  return out[0];
}

Tensor conv2d_backward_data(const Tensor& grad, const Tensor& w, const Shape& input_shape, const Conv2dParams& p) {
  check_float("conv2d_backward_data", "grad", grad, true);
  check_float_like("conv2d_backward_data", "weight", w, "grad", grad, true);
  const ConvGeometry g = conv_geometry("conv2d_backward_data", input_shape, w.shape(), p);
  TROUPE_CHECK(grad.shape() == g.output_shape(), shape_mismatch, "conv2d_backward_data: grad ",
               shape_str(grad.shape()), " must be ", shape_str(g.output_shape()));
  std::vector<Tensor> out{Tensor::empty(input_shape, grad.dtype(), grad.device())};
  dispatch("conv2d_backward_data", {grad.contiguous(), w.contiguous()}, out,
           conv_geometry_attrs(input_shape, w.shape(), p));
  return out[0];
}

Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape, const Conv2dParams& p) {
  check_float("conv2d_backward_weight", "grad", grad, true);
  check_float_like("conv2d_backward_weight", "input", x, "grad", grad, true);
  const ConvGeometry g = conv_geometry("conv2d_backward_weight", x.shape(), weight_shape, p);
  TROUPE_CHECK(grad.shape() == g.output_shape(), shape_mismatch, "conv2d_backward_weight: grad ",
               shape_str(grad.shape()), " must be ", shape_str(g.output_shape()));
  std::vector<Tensor> out{Tensor::empty(weight_shape, grad.dtype(), grad.device())};
  dispatch("conv2d_backward_weight", {grad.contiguous(), x.contiguous()}, out,
           conv_geometry_attrs(x.shape(), weight_shape, p));
  return out[0];
}

Tensor conv2d_backward_bias(const Tensor& grad) {
  TROUPE_CHECK(grad.defined() && grad.dim() == 4, shape_mismatch, "conv2d_backward_bias: grad must be NCHW, got ",
               grad.str());
  return sum(grad, {0, 2, 3});
}

}  // namespace troupe::kernels
