// CPU cross-entropy: one pass per row computing max and log-sum-exp in double.

#include <cmath>

#include "cpu/float_kernels.hpp"

namespace troupe {
namespace {

// in: logits [N, C] dense, targets i64 dense; out: loss 0-d.
template <class T>
void ce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const T* x = in[0].data<T>();
  const std::int64_t* t = in[1].data<std::int64_t>();
  const std::int64_t n = in[0].shape()[0], c = in[0].shape()[1];
  double total = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    const T* p = x + r * c;
    double m = p[0], s = 0.0;
    for (std::int64_t k = 1; k < c; ++k) m = std::fmax(m, p[k]);
    for (std::int64_t k = 0; k < c; ++k) s += std::exp(p[k] - m);
    total += m + std::log(s) - p[t[r]];
  }
  out[0].data<T>()[0] = static_cast<T>(n > 0 ? total / static_cast<double>(n) : 0.0);
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy", ce_kernel);

// in: grad 0-d, logits, targets; out: dlogits [N, C].
template <class T>
void ce_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const double g = in[0].data<T>()[0];
  const T* x = in[1].data<T>();
  const std::int64_t* t = in[2].data<std::int64_t>();
  T* dx = out[0].data<T>();
  const std::int64_t n = in[1].shape()[0], c = in[1].shape()[1];
  for (std::int64_t r = 0; r < n; ++r) {
    const T* p = x + r * c;
    double m = p[0], s = 0.0;
    for (std::int64_t k = 1; k < c; ++k) m = std::fmax(m, p[k]);
    for (std::int64_t k = 0; k < c; ++k) s += std::exp(p[k] - m);
    for (std::int64_t k = 0; k < c; ++k)
      dx[r * c + k] = static_cast<T>((std::exp(p[k] - m) / s - (k == t[r] ? 1.0 : 0.0)) * g / n);
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy_backward", ce_backward_kernel);

}  // namespace
}  // namespace troupe
