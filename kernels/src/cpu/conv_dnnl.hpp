#pragma once
// f32 and bf16 convolution through oneDNN: its direct convolutions (blocked layouts, JIT-compiled AVX2 /
// AVX-512 kernels) run 2-3x faster than im2col + GEMM at the channel counts of vision models.
// Activations are NCHW, or channel-blocked (nChw16c, which oneDNN computes in: no reorder), weights
// OIHW; oneDNN's reorders to and from its own layouts happen inside each call.

#include "conv_geometry.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::cpu {

// Every tensor is dense, of the layout the geometry says, f32 or bf16: f32 throughout, or bf16
// operands (x, w, dy) with results in f32 or bf16 (mixed precision), accumulated in f32 either way.

/// y = conv(x, w) + b (b may be undefined; the dtype of y), plus what y holds when s.accumulate,
/// then max(y, 0) when s.relu; Winograd when s.winograd and oneDNN has it for the shape.
void dnnl_conv_forward(const kernels::ConvGeometry& s, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y);
/// dx = the gradient of the input from dy.
void dnnl_conv_backward_data(const kernels::ConvGeometry& s, const Tensor& dy, const Tensor& w, const Tensor& dx);
/// dw = the gradient of the weights from dy and x.
void dnnl_conv_backward_weights(const kernels::ConvGeometry& s, const Tensor& dy, const Tensor& x, const Tensor& dw);

}  // namespace troupe::cpu
