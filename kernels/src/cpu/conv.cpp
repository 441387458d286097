// Convolution: f32 and bf16 (mixed precision: bf16 operands, f32 or bf16 results) through oneDNN's
// direct convolutions (conv_dnnl.hpp); f64, for the gradient checks, as im2col + GEMM (OpenBLAS),
// each image's patches a [C*kh*kw, Ho*Wo] matrix.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "conv_geometry.hpp"
#include "cpu/blas.hpp"
#include "cpu/conv_dnnl.hpp"
#include "cpu/float_kernels.hpp"

namespace troupe::kernels {

namespace {

// col[(c, i, j), (y, x)] = img[c, y*sh - ph + i, x*sw - pw + j] (0 outside).
template <class T>
void im2col(const ConvGeometry& g, const T* img, T* col) {
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
void col2im(const ConvGeometry& g, const T* col, T* img) {
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

// oneDNN computes every dtype but f64.
template <class T>
inline constexpr bool kOnDnnl = !std::is_same_v<T, double>;

// The forward as im2col + GEMM (f64): y = conv(x, w) + b (b may be undefined), accumulated onto y
// when g.accumulate, then relu when g.relu.
template <class T>
void forward_im2col(const ConvGeometry& g, const Tensor& xt, const Tensor& wt, const Tensor& bt, const Tensor& yt) {
  const T *x = xt.data<T>(), *w = wt.data<T>();
  const T* b = bt.defined() ? bt.data<T>() : nullptr;
  T* y = yt.data<T>();
  std::vector<T> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    im2col(g, x + n * g.c * g.h * g.w, col.data());
    T* yn = y + n * g.o * g.pixels();
    for (std::int64_t o = 0; o < g.o; ++o) {
      T* plane = yn + o * g.pixels();
      if (!g.accumulate) std::fill_n(plane, g.pixels(), b ? b[o] : T(0));
      else if (b) std::for_each(plane, plane + g.pixels(), [&](T& v) { v += b[o]; });
    }
    cpu::gemm(CblasNoTrans, CblasNoTrans, I(g.o), I(g.pixels()), I(g.patch()), T(1), w, I(g.patch()), col.data(),
              I(g.pixels()), T(1), yn, I(g.pixels()));
    if (g.relu)
      for (std::int64_t i = 0; i < g.o * g.pixels(); ++i) yn[i] = yn[i] > T(0) ? yn[i] : T(0);
  }
}

// The forward of geometry g on inputs (x, w[, b]) into out[0].
template <class T>
void forward(const ConvGeometry& g, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  if constexpr (kOnDnnl<T>) cpu::dnnl_conv_forward(g, in[0], in[1], bias, out[0]);
  else forward_im2col<T>(g, in[0], in[1], bias, out[0]);
}

template <class T>
void forward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  forward<T>(conv_geometry_of(a), in, out);
}

// conv2d_residual: y = conv(x, w) + b + r for inputs (r, x, w[, b]) and the graph op's attributes
// (stride, padding; blocked_input, blocked_output, winograd when set). y may be r itself (the
// executor's buffer reuse); otherwise r is copied into y, and the convolution adds to it.
template <class T>
void residual_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const auto flag = [&](const char* name) { return a.has(name) && a.get_int(name) != 0; };
  const std::int64_t s = a.get_int("stride"), pad = a.get_int("padding");
  const Conv2dParams p{s, s, pad, pad, false, flag("blocked_input"), flag("blocked_output"), flag("winograd")};
  TROUPE_CHECK(kOnDnnl<T> || !(p.blocked_input || p.blocked_output), unsupported,
               "conv2d_residual: channel-blocked layouts are f32 and bf16 only");
  const Tensor r = in[0].contiguous(), x = in[1].contiguous(), w = in[2].contiguous();
  const Tensor b = in.size() > 3 ? in[3].contiguous() : Tensor();
  ConvGeometry g = conv_geometry("conv2d_residual", p.blocked_input ? channel_unblocked_shape(x.shape()) : x.shape(),
                                 w.shape(), p);
  g.accumulate = true;
  if (out[0].raw_data() != r.raw_data()) out[0].copy_from(r);
  forward<T>(g, {x, w, b}, out);
}

// The input's gradient as GEMM + col2im (f64).
template <class T>
void backward_data_im2col(const ConvGeometry& g, const Tensor& dyt, const Tensor& wt, const Tensor& dxt) {
  const T *dy = dyt.data<T>(), *w = wt.data<T>();
  T* dx = dxt.data<T>();
  std::fill_n(dx, dxt.numel(), T(0));
  std::vector<T> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    cpu::gemm(CblasTrans, CblasNoTrans, I(g.patch()), I(g.pixels()), I(g.o), T(1), w, I(g.patch()),
              dy + n * g.o * g.pixels(), I(g.pixels()), T(0), col.data(), I(g.pixels()));
    col2im(g, col.data(), dx + n * g.c * g.h * g.w);
  }
}

template <class T>
void backward_data_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const ConvGeometry g = conv_geometry_of(a);
  if constexpr (kOnDnnl<T>) cpu::dnnl_conv_backward_data(g, in[0], in[1], out[0]);
  else backward_data_im2col<T>(g, in[0], in[1], out[0]);
}

// The weights' gradient as im2col + GEMM (f64).
template <class T>
void backward_weight_im2col(const ConvGeometry& g, const Tensor& dyt, const Tensor& xt, const Tensor& dwt) {
  const T *dy = dyt.data<T>(), *x = xt.data<T>();
  T* dw = dwt.data<T>();
  std::fill_n(dw, dwt.numel(), T(0));
  std::vector<T> col(static_cast<std::size_t>(g.patch() * g.pixels()));
  for (std::int64_t n = 0; n < g.n; ++n) {
    im2col(g, x + n * g.c * g.h * g.w, col.data());
    cpu::gemm(CblasNoTrans, CblasTrans, I(g.o), I(g.patch()), I(g.pixels()), T(1), dy + n * g.o * g.pixels(),
              I(g.pixels()), col.data(), I(g.pixels()), T(1), dw, I(g.patch()));
  }
}

template <class T>
void backward_weight_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const ConvGeometry g = conv_geometry_of(a);
  if constexpr (kOnDnnl<T>) cpu::dnnl_conv_backward_weights(g, in[0], in[1], out[0]);
  else backward_weight_im2col<T>(g, in[0], in[1], out[0]);
}

}  // namespace

TROUPE_REGISTER_FLOAT_KERNELS("conv2d", forward_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("conv2d_residual", residual_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("conv2d_backward_data", backward_data_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("conv2d_backward_weight", backward_weight_kernel);
TROUPE_REGISTER_KERNEL("conv2d", cpu, bf16, forward_kernel<BFloat16>);
TROUPE_REGISTER_KERNEL("conv2d_residual", cpu, bf16, residual_kernel<BFloat16>);
TROUPE_REGISTER_KERNEL("conv2d_backward_data", cpu, bf16, backward_data_kernel<BFloat16>);
TROUPE_REGISTER_KERNEL("conv2d_backward_weight", cpu, bf16, backward_weight_kernel<BFloat16>);

}  // namespace troupe::kernels
