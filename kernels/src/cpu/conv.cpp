// Convolution as im2col + GEMM (OpenBLAS): each image's patches become a [C*kh*kw, Ho*Wo] matrix.
#include "troupe/kernels/conv.hpp"

#include <cblas.h>

#include "troupe/kernels/reduce.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::ops {

namespace {

struct Geometry {
  std::int64_t n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw;
  std::int64_t patch() const { return c * kh * kw; }
  std::int64_t pixels() const { return ho * wo; }
};

Geometry geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  TROUPE_CHECK(x.size() == 4 && w.size() == 4, shape_mismatch, op, ": input ", shape_str(x), " and weight ",
               shape_str(w), " must both be rank 4 (NCHW and OIHW)");
  TROUPE_CHECK(x[1] == w[1], shape_mismatch, op, ": input ", shape_str(x), " has ", x[1], " channels but weight ",
               shape_str(w), " expects ", w[1]);
  TROUPE_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0, invalid_argument, op,
               ": strides must be >= 1 and padding >= 0");
  Geometry g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
  TROUPE_CHECK(g.h + 2 * g.ph >= g.kh && g.w + 2 * g.pw >= g.kw, shape_mismatch, op, ": kernel ", g.kh, "x", g.kw,
               " is larger than the padded input ", g.h + 2 * g.ph, "x", g.w + 2 * g.pw);
  g.ho = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.wo = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

Attrs geometry_attrs(const Shape& x, const Shape& w, const Conv2dParams& p) {
  return Attrs()
      .set("input_shape", x)
      .set("weight_shape", w)
      .set("params", std::vector<std::int64_t>{p.stride_h, p.stride_w, p.pad_h, p.pad_w});
}

Geometry geometry_of(const Attrs& a) {
  const auto& q = a.get_ints("params");
  return geometry("conv2d", a.get_ints("input_shape"), a.get_ints("weight_shape"), {q[0], q[1], q[2], q[3]});
}

// col[(c, i, j), (y, x)] = img[c, y*sh - ph + i, x*sw - pw + j] (0 outside).
void im2col(const Geometry& g, const float* img, float* col) {
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        float* row = col + ((c * g.kh + i) * g.kw + j) * g.pixels();
        for (std::int64_t y = 0; y < g.ho; ++y) {
          const std::int64_t iy = y * g.sh - g.ph + i;
          float* out = row + y * g.wo;
          if (iy < 0 || iy >= g.h) {
            std::fill_n(out, g.wo, 0.f);
            continue;
          }
          const float* src = img + (c * g.h + iy) * g.w;
          for (std::int64_t x = 0; x < g.wo; ++x) {
            const std::int64_t ix = x * g.sw - g.pw + j;
            out[x] = ix >= 0 && ix < g.w ? src[ix] : 0.f;
          }
        }
      }
}

// The adjoint of im2col: img[c, ...] += col[(c, i, j), (y, x)].
void col2im(const Geometry& g, const float* col, float* img) {
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const float* row = col + ((c * g.kh + i) * g.kw + j) * g.pixels();
        for (std::int64_t y = 0; y < g.ho; ++y) {
          const std::int64_t iy = y * g.sh - g.ph + i;
          if (iy < 0 || iy >= g.h) continue;
          float* dst = img + (c * g.h + iy) * g.w;
          for (std::int64_t x = 0; x < g.wo; ++x) {
            const std::int64_t ix = x * g.sw - g.pw + j;
            if (ix >= 0 && ix < g.w) dst[ix] += row[y * g.wo + x];
          }
        }
      }
}

int I(std::int64_t v) { return static_cast<int>(v); }

void forward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Geometry g = geometry_of(a);
  const float *x = in[0].data<float>(), *w = in[1].data<float>();
  const float* b = in.size() > 2 && in[2].defined() ? in[2].data<float>() : nullptr;
  float* y = out[0].data<float>();
  std::vector<float> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    im2col(g, x + n * g.c * g.h * g.w, col.data());
    float* yn = y + n * g.o * g.pixels();
    for (std::int64_t o = 0; o < g.o; ++o) std::fill_n(yn + o * g.pixels(), g.pixels(), b ? b[o] : 0.f);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, I(g.o), I(g.pixels()), I(g.patch()), 1.f, w,
                I(g.patch()), col.data(), I(g.pixels()), 1.f, yn, I(g.pixels()));
  }
}

void backward_data_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Geometry g = geometry_of(a);
  const float *dy = in[0].data<float>(), *w = in[1].data<float>();
  float* dx = out[0].data<float>();
  std::fill_n(dx, out[0].numel(), 0.f);
  std::vector<float> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, I(g.patch()), I(g.pixels()), I(g.o), 1.f, w, I(g.patch()),
                dy + n * g.o * g.pixels(), I(g.pixels()), 0.f, col.data(), I(g.pixels()));
    col2im(g, col.data(), dx + n * g.c * g.h * g.w);
  }
}

void backward_weight_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Geometry g = geometry_of(a);
  const float *dy = in[0].data<float>(), *x = in[1].data<float>();
  float* dw = out[0].data<float>();
  std::fill_n(dw, out[0].numel(), 0.f);
  std::vector<float> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    im2col(g, x + n * g.c * g.h * g.w, col.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, I(g.o), I(g.patch()), I(g.pixels()), 1.f,
                dy + n * g.o * g.pixels(), I(g.pixels()), col.data(), I(g.pixels()), 1.f, dw, I(g.patch()));
  }
}

void check_f32(const char* op, const Tensor& t, const char* role) {
  TROUPE_CHECK(t.defined() && t.dtype() == DType::f32, dtype_mismatch, op, ": ", role, " ", t.str(), " must be f32");
}

Shape output_shape(const Geometry& g) { return {g.n, g.o, g.ho, g.wo}; }

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  check_f32("conv2d", x, "input");
  check_f32("conv2d", w, "weight");
  const Geometry g = geometry("conv2d", x.shape(), w.shape(), p);
  if (bias.defined()) {
    check_f32("conv2d", bias, "bias");
    TROUPE_CHECK(bias.shape() == Shape{g.o}, shape_mismatch, "conv2d: bias ", shape_str(bias.shape()), " must be [",
                 g.o, "]");
  }
  std::vector<Tensor> out{Tensor::empty(output_shape(g), DType::f32, x.device())};
  std::vector<Tensor> in{x.contiguous(), w.contiguous()};
  if (bias.defined()) in.push_back(bias.contiguous());
  dispatch("conv2d", in, out, geometry_attrs(x.shape(), w.shape(), p));
  return out[0];
}

Tensor conv2d_backward_data(const Tensor& grad, const Tensor& w, const Shape& input_shape, const Conv2dParams& p) {
  check_f32("conv2d_backward_data", grad, "grad");
  check_f32("conv2d_backward_data", w, "weight");
  const Geometry g = geometry("conv2d_backward_data", input_shape, w.shape(), p);
  TROUPE_CHECK(grad.shape() == output_shape(g), shape_mismatch, "conv2d_backward_data: grad ",
               shape_str(grad.shape()), " must be ", shape_str(output_shape(g)));
  std::vector<Tensor> out{Tensor::empty(input_shape, DType::f32, grad.device())};
  dispatch("conv2d_backward_data", {grad.contiguous(), w.contiguous()}, out,
           geometry_attrs(input_shape, w.shape(), p));
  return out[0];
}

Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape, const Conv2dParams& p) {
  check_f32("conv2d_backward_weight", grad, "grad");
  check_f32("conv2d_backward_weight", x, "input");
  const Geometry g = geometry("conv2d_backward_weight", x.shape(), weight_shape, p);
  TROUPE_CHECK(grad.shape() == output_shape(g), shape_mismatch, "conv2d_backward_weight: grad ",
               shape_str(grad.shape()), " must be ", shape_str(output_shape(g)));
  std::vector<Tensor> out{Tensor::empty(weight_shape, DType::f32, grad.device())};
  dispatch("conv2d_backward_weight", {grad.contiguous(), x.contiguous()}, out,
           geometry_attrs(x.shape(), weight_shape, p));
  return out[0];
}

Tensor conv2d_backward_bias(const Tensor& grad) {
  TROUPE_CHECK(grad.defined() && grad.dim() == 4, shape_mismatch, "conv2d_backward_bias: grad must be NCHW, got ",
               grad.str());
  return sum(grad, {0, 2, 3});
}

TROUPE_REGISTER_KERNEL("conv2d", cpu, f32, forward_kernel);
TROUPE_REGISTER_KERNEL("conv2d_backward_data", cpu, f32, backward_data_kernel);
TROUPE_REGISTER_KERNEL("conv2d_backward_weight", cpu, f32, backward_weight_kernel);

}  // namespace troupe::ops
