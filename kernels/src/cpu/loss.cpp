// CPU cross-entropy, a row at a time on the pool of cores: f32 rows (and bf16 and f16 rows, widened
// to f32) through the vectorised softmax row, as PyTorch's CPU kernel computes in float; f64 rows
// with max and log-sum-exp in double (the reference). The loss and its incoming gradient are f32
// for low-precision logits.

#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/float_kernels.hpp"
#include "cpu/low_rows.hpp"
#include "cpu/parallel.hpp"
#include "cpu/softmax_row.hpp"

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
  // Each row's loss on whichever core, then their sum in row order: the same bits on any cores.
  std::vector<double> row_loss(static_cast<std::size_t>(n));
  cpu::parallel_rows(n, c, 3.0, [&](std::int64_t begin, std::int64_t end) {
    cpu::RowIn<T> row_in(c);
    std::vector<C> log_probs(static_cast<std::size_t>(c));
    for (std::int64_t r = begin; r < end; ++r) {
      const C* p = row_in(x + r * c);
      if constexpr (std::is_same_v<C, float>) {
        cpu::softmax_row(p, log_probs.data(), c, true, nullptr, c);
        row_loss[static_cast<std::size_t>(r)] = -static_cast<double>(log_probs[static_cast<std::size_t>(t[r])]);
      } else {
        const auto [m, s] = max_and_sum(p, c);
        row_loss[static_cast<std::size_t>(r)] = m + std::log(s) - p[t[r]];
      }
    }
  });
  double total = 0.0;
  for (double l : row_loss) total += l;
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
  cpu::parallel_rows(n, c, 4.0, [&](std::int64_t begin, std::int64_t end) {
    cpu::RowIn<T> row_in(c);
    cpu::RowOut<T> row_out(c);
    for (std::int64_t r = begin; r < end; ++r) {
      const C* p = row_in(x + r * c);
      T* dr = dx + r * c;
      C* d = row_out.at(dr);
      if constexpr (std::is_same_v<C, float>) {
        cpu::softmax_row(p, d, c, false, nullptr, c);
        d[t[r]] -= 1.0f;
        const float scale = static_cast<float>(g / static_cast<double>(n));
        for (std::int64_t k = 0; k < c; ++k) d[k] *= scale;
      } else {
        const auto [m, s] = max_and_sum(p, c);
        for (std::int64_t k = 0; k < c; ++k)
          d[k] = static_cast<C>((std::exp(p[k] - m) / s - (k == t[r] ? 1.0 : 0.0)) * g / n);
      }
      row_out.store(dr);
    }
  });
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy_backward", ce_backward_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("cross_entropy_backward", ce_backward_kernel);

// Vocab-parallel parts: in: logits [N, C_l] (columns from attribute "first"), targets i64, max [N];
// out: parts f64 [N, 2].
template <class T>
void ce_parts_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using C = cpu::ComputeType<T>;
  const T* x = in[0].data<T>();
  const std::int64_t* t = in[1].data<std::int64_t>();
  const T* mx = in[2].data<T>();
  double* parts = out[0].data<double>();
  const std::int64_t n = in[0].shape()[0], c = in[0].shape()[1], first = attrs.get_int("first");
  cpu::RowIn<T> row_in(c), max_in(n);
  const C* maxima = max_in(mx);
  for (std::int64_t r = 0; r < n; ++r) {
    const C* p = row_in(x + r * c);
    const double m = maxima[r];
    double s = 0.0;
    for (std::int64_t k = 0; k < c; ++k) s += std::exp(p[k] - m);
    const std::int64_t k = t[r] - first;
    parts[2 * r] = s;
    parts[2 * r + 1] = k >= 0 && k < c ? p[k] - m : 0.0;
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy_parts", ce_parts_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("cross_entropy_parts", ce_parts_kernel);

// in: parts f64 [N, 2] summed over the devices; out: the loss, 0-d f32 or f64.
void ce_from_parts_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const double* parts = in[0].data<double>();
  const std::int64_t n = in[0].shape()[0];
  double total = 0.0;
  for (std::int64_t r = 0; r < n; ++r) total += std::log(parts[2 * r]) - parts[2 * r + 1];
  const double loss = n > 0 ? total / static_cast<double>(n) : 0.0;
  if (out[0].dtype() == DType::f32) out[0].data<float>()[0] = static_cast<float>(loss);
  else out[0].data<double>()[0] = loss;
}
TROUPE_REGISTER_KERNEL("cross_entropy_from_parts", cpu, f64, ce_from_parts_kernel);

// in: logits [N, C_l] (columns from attribute "first"), targets, max [N], parts [N, 2] summed,
// grad 0-d; out: dlogits [N, C_l].
template <class T>
void ce_parts_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using C = cpu::ComputeType<T>;
  const T* x = in[0].data<T>();
  const std::int64_t* t = in[1].data<std::int64_t>();
  const T* mx = in[2].data<T>();
  const double* parts = in[3].data<double>();
  const double g = in[4].data<C>()[0];
  T* dx = out[0].data<T>();
  const std::int64_t n = in[0].shape()[0], c = in[0].shape()[1], first = attrs.get_int("first");
  cpu::RowIn<T> row_in(c), max_in(n);
  cpu::RowOut<T> row_out(c);
  const C* maxima = max_in(mx);
  for (std::int64_t r = 0; r < n; ++r) {
    const C* p = row_in(x + r * c);
    T* dr = dx + r * c;
    C* d = row_out.at(dr);
    const double m = maxima[r], s = parts[2 * r];
    const std::int64_t target = t[r] - first;
    for (std::int64_t k = 0; k < c; ++k) d[k] = static_cast<C>((std::exp(p[k] - m) / s - (k == target ? 1.0 : 0.0)) * g / n);
    row_out.store(dr);
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy_parts_backward", ce_parts_backward_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("cross_entropy_parts_backward", ce_parts_backward_kernel);

}  // namespace
}  // namespace troupe
