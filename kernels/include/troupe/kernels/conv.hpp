#pragma once
// 2-D convolution, NCHW, with stride and zero padding: forward and the three backward parts.

#include <cstdint>

#include <optional>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Channels per block of the channel-blocked activation layout (oneDNN's nChw16c), in which its
/// direct convolutions read and write without reorders.
inline constexpr std::int64_t kChannelBlock = 16;

/// Stride and padding of a convolution, its epilogue, and the layouts of its input and output.
struct Conv2dParams {
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool relu = false;            // max(y, 0) applied as each result is stored (the bits of conv, then relu)
  bool blocked_input = false;   // x is channel-blocked: [N, C/16, H, W, 16] (f32 only)
  bool blocked_output = false;  // y is channel-blocked: [N, O/16, Ho, Wo, 16] (f32 only)
  bool winograd = false;        // for inference: Winograd F(2x2, 3x3) where oneDNN has it (f32,
                                // 3x3, stride 1), else direct; it rounds differently (~1e-6)
};

/// The channel-blocked shape [N, C/16, H, W, 16] of an NCHW shape; throws unless C divides by 16.
Shape channel_blocked_shape(const Shape& nchw);
/// The NCHW shape a channel-blocked [N, C/16, H, W, 16] tensor holds; throws for another shape.
Shape channel_unblocked_shape(const Shape& blocked);

/// y[N, O, Ho, Wo] = conv(x[N, C, H, W], w[O, C, kh, kw]) + bias[O] (bias may be undefined), then
/// max(y, 0) when p.relu; x and y are channel-blocked as p says. x and w are f32, f64 or bf16 (both
/// the same); y has their dtype, or `out_dtype` (f32 for bf16 operands: the f32 accumulator written
/// as it is), and the bias has y's.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p,
              std::optional<DType> out_dtype = std::nullopt);
/// d loss / d x from grad[N, O, Ho, Wo] and the weight, in their dtype (f32, f64 or bf16).
Tensor conv2d_backward_data(const Tensor& grad, const Tensor& w, const Shape& input_shape, const Conv2dParams& p);
/// d loss / d w from grad and the forward input.
Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape, const Conv2dParams& p);
/// d loss / d bias: grad summed over N, Ho and Wo.
Tensor conv2d_backward_bias(const Tensor& grad);

}  // namespace troupe::kernels
