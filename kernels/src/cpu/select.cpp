// CPU kernels of the select ops: the causal mask on a dense input (rows on the pool of cores), and the max gradient on
// operands of any strides.
#include "cpu/float_kernels.hpp"
#include "cpu/parallel.hpp"
#include "cpu/strided_loop.hpp"

namespace troupe::kernels {

namespace {

template <class T>
void causal_mask_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const T fill = from_double<T>(attrs.get_double("fill"));
  const std::int64_t n = x.shape().back();
  const std::int64_t mats = x.numel() / (n * n);
  const T* src = x.data<T>();
  T* dst = out[0].data<T>();
  cpu::parallel_rows(mats * n, n, 0.5, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t i = r % n;  // the query: keys after it are masked
      const T* row = src + r * n;
      T* o = dst + r * n;
      for (std::int64_t j = 0; j < n; ++j) o[j] = j <= i ? row[j] : fill;
    }
  });
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

}  // namespace

TROUPE_REGISTER_FLOAT_KERNELS("causal_mask", causal_mask_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("causal_mask", causal_mask_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("max_backward", max_backward_kernel);

}  // namespace troupe::kernels
