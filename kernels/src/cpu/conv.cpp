// Convolution: f32 through oneDNN's direct convolutions (conv_dnnl.hpp); f64, for the gradient
// checks, as im2col + GEMM (OpenBLAS), each image's patches a [C*kh*kw, Ho*Wo] matrix.
#include "troupe/kernels/conv.hpp"

#include <type_traits>

#include "cpu/blas.hpp"
#include "cpu/conv_dnnl.hpp"
#include "cpu/float_kernels.hpp"
#include "troupe/kernels/reduce.hpp"

namespace troupe::kernels {

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
template <class T>
void im2col(const Geometry& g, const T* img, T* col) {
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * g.pixels();
        for (std::int64_t y = 0; y < g.ho; ++y) {
          const std::int64_t iy = y * g.sh - g.ph + i;
          T* out = row + y * g.wo;
          if (iy < 0 || iy >= g.h) {
            std::fill_n(out, g.wo, T(0));
            continue;
          }
          const T* src = img + (c * g.h + iy) * g.w;
          for (std::int64_t x = 0; x < g.wo; ++x) {
            const std::int64_t ix = x * g.sw - g.pw + j;
            out[x] = ix >= 0 && ix < g.w ? src[ix] : T(0);
          }
        }
      }
}

// The adjoint of im2col: img[c, ...] += col[(c, i, j), (y, x)].
template <class T>
void col2im(const Geometry& g, const T* col, T* img) {
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * g.pixels();
        for (std::int64_t y = 0; y < g.ho; ++y) {
          const std::int64_t iy = y * g.sh - g.ph + i;
          if (iy < 0 || iy >= g.h) continue;
          T* dst = img + (c * g.h + iy) * g.w;
          for (std::int64_t x = 0; x < g.wo; ++x) {
            const std::int64_t ix = x * g.sw - g.pw + j;
            if (ix >= 0 && ix < g.w) dst[ix] += row[y * g.wo + x];
          }
        }
      }
}

int I(std::int64_t v) { return static_cast<int>(v); }

cpu::ConvShape dnnl_shape(const Geometry& g) {
  return {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.ho, g.wo, g.sh, g.sw, g.ph, g.pw};
}

template <class T>
void forward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Geometry g = geometry_of(a);
  const T *x = in[0].data<T>(), *w = in[1].data<T>();
  const T* b = in.size() > 2 && in[2].defined() ? in[2].data<T>() : nullptr;
  T* y = out[0].data<T>();
  if constexpr (std::is_same_v<T, float>) return cpu::dnnl_conv_forward(dnnl_shape(g), x, w, b, y);
  std::vector<T> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    im2col(g, x + n * g.c * g.h * g.w, col.data());
    T* yn = y + n * g.o * g.pixels();
    for (std::int64_t o = 0; o < g.o; ++o) std::fill_n(yn + o * g.pixels(), g.pixels(), b ? b[o] : T(0));
    cpu::gemm(CblasNoTrans, CblasNoTrans, I(g.o), I(g.pixels()), I(g.patch()), T(1), w, I(g.patch()), col.data(),
              I(g.pixels()), T(1), yn, I(g.pixels()));
  }
}

template <class T>
void backward_data_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Geometry g = geometry_of(a);
  const T *dy = in[0].data<T>(), *w = in[1].data<T>();
  T* dx = out[0].data<T>();
  if constexpr (std::is_same_v<T, float>) return cpu::dnnl_conv_backward_data(dnnl_shape(g), dy, w, dx);
  std::fill_n(dx, out[0].numel(), T(0));
  std::vector<T> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    cpu::gemm(CblasTrans, CblasNoTrans, I(g.patch()), I(g.pixels()), I(g.o), T(1), w, I(g.patch()),
              dy + n * g.o * g.pixels(), I(g.pixels()), T(0), col.data(), I(g.pixels()));
    col2im(g, col.data(), dx + n * g.c * g.h * g.w);
  }
}

template <class T>
void backward_weight_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Geometry g = geometry_of(a);
  const T *dy = in[0].data<T>(), *x = in[1].data<T>();
  T* dw = out[0].data<T>();
  if constexpr (std::is_same_v<T, float>) return cpu::dnnl_conv_backward_weights(dnnl_shape(g), dy, x, dw);
  std::fill_n(dw, out[0].numel(), T(0));
  std::vector<T> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    im2col(g, x + n * g.c * g.h * g.w, col.data());
    cpu::gemm(CblasNoTrans, CblasTrans, I(g.o), I(g.patch()), I(g.pixels()), T(1), dy + n * g.o * g.pixels(),
              I(g.pixels()), col.data(), I(g.pixels()), T(1), dw, I(g.patch()));
  }
}

Shape output_shape(const Geometry& g) { return {g.n, g.o, g.ho, g.wo}; }

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  cpu::check_float("conv2d", "input", x);
  cpu::check_float_like("conv2d", "weight", w, "input", x);
  const Geometry g = geometry("conv2d", x.shape(), w.shape(), p);
  if (bias.defined()) {
    cpu::check_float_like("conv2d", "bias", bias, "input", x);
    TROUPE_CHECK(bias.shape() == Shape{g.o}, shape_mismatch, "conv2d: bias ", shape_str(bias.shape()), " must be [",
                 g.o, "]");
  }
  std::vector<Tensor> out{Tensor::empty(output_shape(g), x.dtype(), x.device())};
  std::vector<Tensor> in{x.contiguous(), w.contiguous()};
  if (bias.defined()) in.push_back(bias.contiguous());
  dispatch("conv2d", in, out, geometry_attrs(x.shape(), w.shape(), p));
  return out[0];
}

Tensor conv2d_backward_data(const Tensor& grad, const Tensor& w, const Shape& input_shape, const Conv2dParams& p) {
  cpu::check_float("conv2d_backward_data", "grad", grad);
  cpu::check_float_like("conv2d_backward_data", "weight", w, "grad", grad);
  const Geometry g = geometry("conv2d_backward_data", input_shape, w.shape(), p);
  TROUPE_CHECK(grad.shape() == output_shape(g), shape_mismatch, "conv2d_backward_data: grad ",
               shape_str(grad.shape()), " must be ", shape_str(output_shape(g)));
  std::vector<Tensor> out{Tensor::empty(input_shape, grad.dtype(), grad.device())};
  dispatch("conv2d_backward_data", {grad.contiguous(), w.contiguous()}, out,
           geometry_attrs(input_shape, w.shape(), p));
  return out[0];
}

Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape, const Conv2dParams& p) {
  cpu::check_float("conv2d_backward_weight", "grad", grad);
  cpu::check_float_like("conv2d_backward_weight", "input", x, "grad", grad);
  const Geometry g = geometry("conv2d_backward_weight", x.shape(), weight_shape, p);
  TROUPE_CHECK(grad.shape() == output_shape(g), shape_mismatch, "conv2d_backward_weight: grad ",
               shape_str(grad.shape()), " must be ", shape_str(output_shape(g)));
  std::vector<Tensor> out{Tensor::empty(weight_shape, grad.dtype(), grad.device())};
  dispatch("conv2d_backward_weight", {grad.contiguous(), x.contiguous()}, out,
           geometry_attrs(x.shape(), weight_shape, p));
  return out[0];
}

Tensor conv2d_backward_bias(const Tensor& grad) {
  TROUPE_CHECK(grad.defined() && grad.dim() == 4, shape_mismatch, "conv2d_backward_bias: grad must be NCHW, got ",
               grad.str());
  return sum(grad, {0, 2, 3});
}

TROUPE_REGISTER_FLOAT_KERNELS("conv2d", forward_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("conv2d_backward_data", backward_data_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("conv2d_backward_weight", backward_weight_kernel);

}  // namespace troupe::kernels
