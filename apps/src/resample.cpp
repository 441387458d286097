// Separable bicubic resampling with PIL's antialiasing: when shrinking, the kernel is stretched by the
// scale factor so each output pixel averages the input pixels it covers instead of sampling a few.
#include <algorithm>
#include <cmath>

#include "troupe/apps/image.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::apps {
namespace {

// Keys' cubic convolution kernel with a = -0.5: reproduces quadratics and is what PIL and OpenCV use.
double keys_cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// For each output position, `taps` input indices and weights; the same table serves every row
// (or column) and every image of a batch, so it is computed once per call.
struct Weights {
  std::int64_t taps = 0;
  std::vector<std::int64_t> index;  // [out * taps], clamped into [0, in)
  std::vector<float> weight;        // [out * taps], each group of taps sums to 1
};

Weights make_weights(std::int64_t in, std::int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double stretch = std::max(scale, 1.0);  // > 1 only when shrinking: the antialiasing
  const double support = 2.0 * stretch;
  Weights w;
  w.taps = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  w.index.resize(static_cast<std::size_t>(out * w.taps));
  w.weight.resize(w.index.size());
  std::vector<double> raw(static_cast<std::size_t>(w.taps));
  for (std::int64_t o = 0; o < out; ++o) {
    // Pixel centres aligned: output pixel o covers input coordinates [o, o + 1) * scale.
    const double centre = (static_cast<double>(o) + 0.5) * scale;
    const std::int64_t first = static_cast<std::int64_t>(std::floor(centre - support));
    double sum = 0.0;
    for (std::int64_t t = 0; t < w.taps; ++t) {
      const double distance = static_cast<double>(first + t) + 0.5 - centre;
      raw[t] = keys_cubic(distance / stretch);
      sum += raw[t];
    }
    for (std::int64_t t = 0; t < w.taps; ++t) {
      const std::size_t k = static_cast<std::size_t>(o * w.taps + t);
      w.index[k] = std::clamp<std::int64_t>(first + t, 0, in - 1);  // edge pixels repeat outward
      w.weight[k] = static_cast<float>(raw[t] / sum);
    }
  }
  return w;
}

}  // namespace

Tensor resize_bicubic(const Tensor& image, std::int64_t out_h, std::int64_t out_w) {
  TROUPE_CHECK(image.defined() && image.dim() >= 2, shape_mismatch,
               "resize_bicubic: expected an image [3, H, W] or a batch [N, 3, H, W], got ",
               image.defined() ? shape_str(image.shape()) : std::string("an undefined tensor"));
  TROUPE_CHECK(is_floating(image.dtype()), dtype_mismatch, "resize_bicubic: the image has dtype ",
               dtype_name(image.dtype()), "; pass a floating tensor");
  TROUPE_CHECK(out_h > 0 && out_w > 0, invalid_argument, "resize_bicubic: output size ", out_h, "x", out_w,
               " is not positive; pass out_h, out_w >= 1");
  const std::int64_t in_h = image.size(-2), in_w = image.size(-1);
  TROUPE_CHECK(in_h > 0 && in_w > 0, invalid_argument, "resize_bicubic: the image of shape ",
               shape_str(image.shape()), " is empty");
  const Tensor src = image.to(Device::cpu()).to(DType::f32);
  Shape out_shape = image.shape();
  out_shape[out_shape.size() - 2] = out_h;
  out_shape[out_shape.size() - 1] = out_w;
  Tensor out = Tensor::empty(out_shape, DType::f32);
  const std::int64_t planes = src.numel() / (in_h * in_w);

  const Weights wx = make_weights(in_w, out_w);
  const Weights wy = make_weights(in_h, out_h);
  std::vector<float> rows(static_cast<std::size_t>(in_h * out_w));  // one plane resized along W only
  const float* in = src.data<float>();
  float* dst = out.data<float>();
  for (std::int64_t p = 0; p < planes; ++p) {
    const float* plane = in + p * in_h * in_w;
    for (std::int64_t y = 0; y < in_h; ++y) {
      const float* row = plane + y * in_w;
      for (std::int64_t x = 0; x < out_w; ++x) {
        const std::int64_t* idx = &wx.index[static_cast<std::size_t>(x * wx.taps)];
        const float* wt = &wx.weight[static_cast<std::size_t>(x * wx.taps)];
        float acc = 0.0f;
        for (std::int64_t t = 0; t < wx.taps; ++t) acc += wt[t] * row[idx[t]];
        rows[static_cast<std::size_t>(y * out_w + x)] = acc;
      }
    }
    // Vertical pass row by row: the inner loop runs along contiguous memory and vectorises.
    float* out_plane = dst + p * out_h * out_w;
    for (std::int64_t y = 0; y < out_h; ++y) {
      float* out_row = out_plane + y * out_w;
      std::fill(out_row, out_row + out_w, 0.0f);
      for (std::int64_t t = 0; t < wy.taps; ++t) {
        const std::size_t k = static_cast<std::size_t>(y * wy.taps + t);
        const float wt = wy.weight[k];
        if (wt == 0.0f) continue;
        const float* row = rows.data() + wy.index[k] * out_w;
        for (std::int64_t x = 0; x < out_w; ++x) out_row[x] += wt * row[x];
      }
    }
  }
  return out;
}

}  // namespace troupe::apps
