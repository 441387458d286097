#pragma once
// The geometry of a 2-D convolution, shared by the conv front ends (which check it and size the
// outputs) and every device's conv kernels (which read it back from the call's attributes).

#include <cstdint>
#include <vector>

#include "troupe/kernels/conv.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {

/// Sizes of one convolution: batch n, channels c, input h x w, o filters of kh x kw, output
/// ho x wo, strides sh, sw and paddings ph, pw; `relu` asks the forward for a relu epilogue, and
/// the blocked flags say the forward's input / output are channel-blocked, `winograd` asks the
/// forward for the Winograd algorithm (inference).
struct ConvGeometry {
  std::int64_t n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw;
  bool relu = false, blocked_src = false, blocked_dst = false, winograd = false;
  bool accumulate = false;  // the forward adds the convolution to what y holds (a residual)
  /// Elements of one receptive field (a column of im2col).
  std::int64_t patch() const { return c * kh * kw; }
  /// Output pixels per image and filter.
  std::int64_t pixels() const { return ho * wo; }
  /// [n, o, ho, wo].
  Shape output_shape() const { return {n, o, ho, wo}; }
};

/// The geometry of input shape `x` (NCHW) and weight shape `w` (OIHW) under `p`; throws naming `op`
/// when the shapes do not fit.
inline ConvGeometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  TROUPE_CHECK(x.size() == 4 && w.size() == 4, shape_mismatch, op, ": input ", shape_str(x), " and weight ",
               shape_str(w), " must both be rank 4 (NCHW and OIHW)");
  TROUPE_CHECK(x[1] == w[1], shape_mismatch, op, ": input ", shape_str(x), " has ", x[1], " channels but weight ",
               shape_str(w), " expects ", w[1]);
  TROUPE_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0, invalid_argument, op,
               ": strides must be >= 1 and padding >= 0");
  ConvGeometry g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                  p.relu,  p.blocked_input, p.blocked_output, p.winograd};
  TROUPE_CHECK(g.h + 2 * g.ph >= g.kh && g.w + 2 * g.pw >= g.kw, shape_mismatch, op, ": kernel ", g.kh, "x", g.kw,
               " is larger than the padded input ", g.h + 2 * g.ph, "x", g.w + 2 * g.pw);
  g.ho = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.wo = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

/// The attributes a conv kernel call carries: both shapes and the parameters.
inline Attrs conv_geometry_attrs(const Shape& x, const Shape& w, const Conv2dParams& p) {
  return Attrs()
      .set("input_shape", x)
      .set("weight_shape", w)
      .set("params", std::vector<std::int64_t>{p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.relu, p.blocked_input,
                                               p.blocked_output, p.winograd});
}

/// The geometry a kernel reads back from conv_geometry_attrs.
inline ConvGeometry conv_geometry_of(const Attrs& a) {
  const auto& q = a.get_ints("params");
  return conv_geometry("conv2d", a.get_ints("input_shape"), a.get_ints("weight_shape"), 
                       {q[0], q[1], q[2], q[3], q[4] != 0, q[5] != 0, q[6] != 0, q[7] != 0});
}

}  // namespace troupe::kernels
