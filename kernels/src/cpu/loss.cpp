// CPU cross-entropy: one pass per row computing max and log-sum-exp in double. bf16 and f16 rows
// of logits are widened to f32 rows; the loss and its incoming gradient are f32 for them.

#include <cmath>
#include <utility>

#include "cpu/float_kernels.hpp"
#include "cpu/low_rows.hpp"

namespace troupe {
namespace {

// The max and sum(exp(p - max)) of one row of c logits.
template <class C>
std::pair<double, double> max_and_sum(const C* p, std::int64_t c) {
  double m = p[0], s = 0.0;
  for (std::int64_t k = 1; k < c; ++k) m = std::fmax(m, p[k]);
  for (std::int64_t k = 0; k < c; ++k) s += std::exp(p[k] - m);
  return {m, s};
}

// in: logits [N, C] dense, targets i64 dense; out: loss 0-d.
template <class T>
void ce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  using C = cpu::ComputeType<T>;
  const T* x = in[0].data<T>();
  const std::int64_t* t = in[1].data<std::int64_t>();
  const std::int64_t n = in[0].shape()[0], c = in[0].shape()[1];
  cpu::RowIn<T> row_in(c);
  double total = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    const C* p = row_in(x + r * c);
    const auto [m, s] = max_and_sum(p, c);
    total += m + std::log(s) - p[t[r]];
  }
  out[0].data<C>()[0] = static_cast<C>(n > 0 ? total / static_cast<double>(n) : 0.0);
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy", ce_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("cross_entropy", ce_kernel);

// in: logits, targets, grad 0-d; out: dlogits [N, C].
template <class T>
void ce_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  using C = cpu::ComputeType<T>;
  const T* x = in[0].data<T>();
  const std::int64_t* t = in[1].data<std::int64_t>();
  const double g = in[2].data<C>()[0];
  T* dx = out[0].data<T>();
  const std::int64_t n = in[0].shape()[0], c = in[0].shape()[1];
  cpu::RowIn<T> row_in(c);
  cpu::RowOut<T> row_out(c);
  for (std::int64_t r = 0; r < n; ++r) {
    const C* p = row_in(x + r * c);
    T* dr = dx + r * c;
    C* d = row_out.at(dr);
    const auto [m, s] = max_and_sum(p, c);
    for (std::int64_t k = 0; k < c; ++k)
      d[k] = static_cast<C>((std::exp(p[k] - m) / s - (k == t[r] ? 1.0 : 0.0)) * g / n);
    row_out.store(dr);
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy_backward", ce_backward_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("cross_entropy_backward", ce_backward_kernel);

}  // namespace
}  // namespace troupe
