#include "troupe/kernels/select.hpp"

#include "cpu/strided_loop.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {

namespace {
void check_float(const char* op, const Tensor& t) {
  TROUPE_CHECK(t.defined(), invalid_argument, op, ": undefined input");
  TROUPE_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, dtype_mismatch, op, ": expects f32 or f64, got ",
               t.str());
}

template <class T>
void causal_mask_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor x = in[0].contiguous();
  const T fill = static_cast<T>(attrs.get_double("fill"));
  const std::int64_t n = x.shape().back();
  const std::int64_t mats = x.numel() / (n * n);
  const T* src = x.data<T>();
  T* dst = out[0].data<T>();
  for (std::int64_t m = 0; m < mats; ++m)
    for (std::int64_t i = 0; i < n; ++i) {
      const T* row = src + (m * n + i) * n;
      T* o = dst + (m * n + i) * n;
      for (std::int64_t j = 0; j < n; ++j) o[j] = j <= i ? row[j] : fill;
    }
}

template <class T>
void max_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Tensor &grad = in[0], &x = in[1], &y = in[2];
  const Shape& shape = x.shape();
  // Ties share the gradient, so count them first (one count per reduced group).
  Tensor count = Tensor::zeros(y.shape(), DType::f64);
  const Strides sx = x.strides(), sy = cpu::broadcast_strides(y.shape(), y.strides(), shape),
                sc = cpu::broadcast_strides(count.shape(), count.strides(), shape),
                sg = cpu::broadcast_strides(grad.shape(), grad.strides(), shape), so = out[0].strides();
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  const T* pg = grad.data<T>();
  double* pc = count.data<double>();
  T* po = out[0].data<T>();
  cpu::for_each_run<3>(shape, {&sx, &sy, &sc}, [&](auto off, auto step, std::int64_t n) {
    for (std::int64_t k = 0; k < n; ++k)
      if (px[off[0] + k * step[0]] == py[off[1] + k * step[1]]) pc[off[2] + k * step[2]] += 1.0;
  });
  cpu::for_each_run<5>(shape, {&so, &sx, &sy, &sc, &sg}, [&](auto off, auto step, std::int64_t n) {
    for (std::int64_t k = 0; k < n; ++k) {
      const bool hit = px[off[1] + k * step[1]] == py[off[2] + k * step[2]];
      po[off[0] + k * step[0]] =
          hit ? static_cast<T>(pg[off[4] + k * step[4]] / pc[off[3] + k * step[3]]) : T(0);
    }
  });
}

TROUPE_REGISTER_KERNEL("causal_mask", cpu, f32, causal_mask_kernel<float>);
TROUPE_REGISTER_KERNEL("causal_mask", cpu, f64, causal_mask_kernel<double>);
TROUPE_REGISTER_KERNEL("max_backward", cpu, f32, max_backward_kernel<float>);
TROUPE_REGISTER_KERNEL("max_backward", cpu, f64, max_backward_kernel<double>);
}  // namespace

Tensor causal_mask(const Tensor& x, double fill) {
  check_float("causal_mask", x);
  TROUPE_CHECK(x.dim() >= 2 && x.shape()[x.dim() - 1] == x.shape()[x.dim() - 2], shape_mismatch,
               "causal_mask: the last two dims must be square (queries x keys), got ", shape_str(x.shape()));
  std::vector<Tensor> out{Tensor::empty(x.shape(), x.dtype(), x.device())};
  dispatch("causal_mask", {x}, out, Attrs().set("fill", fill));
  return out[0];
}

Tensor max_backward(const Tensor& grad, const Tensor& x, const Tensor& y) {
  for (const Tensor* t : {&grad, &x, &y}) check_float("max_backward", *t);
  TROUPE_CHECK(grad.dtype() == x.dtype() && y.dtype() == x.dtype(), dtype_mismatch,
               "max_backward: grad, x and max must share a dtype, got ", grad.str(), ", ", x.str(), ", ", y.str());
  TROUPE_CHECK(y.dim() == x.dim() && grad.shape() == y.shape(), shape_mismatch,
               "max_backward: grad ", shape_str(grad.shape()), " and max ", shape_str(y.shape()),
               " must have x's rank with reduced dims kept as 1; x is ", shape_str(x.shape()));
  broadcast_shapes(y.shape(), x.shape(), "max_backward");
  std::vector<Tensor> out{Tensor::empty(x.shape(), x.dtype(), x.device())};
  dispatch("max_backward", {grad, x, y}, out);
  return out[0];
}

}  // namespace troupe::kernels
