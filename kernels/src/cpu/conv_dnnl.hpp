#pragma once
// f32 convolution through oneDNN: its direct convolutions (blocked layouts, JIT-compiled AVX2 /
// AVX-512 kernels) run 2-3x faster than im2col + GEMM at the channel counts of vision models.
// Activations are NCHW, or channel-blocked (nChw16c, which oneDNN computes in: no reorder), weights
// OIHW; oneDNN's reorders to and from its own layouts happen inside each call.

#include "conv_geometry.hpp"

namespace troupe::cpu {

/// y = conv(x, w) + b (b may be null), plus what y holds when s.accumulate, then max(y, 0) when
/// s.relu; Winograd when s.winograd and oneDNN has it for the shape.
void dnnl_conv_forward(const kernels::ConvGeometry& s, const float* x, const float* w, const float* b, float* y);
/// dx = the gradient of the input from dy.
void dnnl_conv_backward_data(const kernels::ConvGeometry& s, const float* dy, const float* w, float* dx);
/// dw = the gradient of the weights from dy and x.
void dnnl_conv_backward_weights(const kernels::ConvGeometry& s, const float* dy, const float* x, float* dw);

}  // namespace troupe::cpu
