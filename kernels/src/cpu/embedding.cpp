// CPU embedding lookup / scatter-add, in f32, f64, bf16 and f16. The front end checks ids
// (converted to dense i64).

#include <algorithm>
#include <vector>

#include "cpu/float_kernels.hpp"
#include "cpu/low_rows.hpp"

namespace troupe {
namespace {

// in: weight [V, D] (rows from attribute "first" of the table), ids i64 dense; out: y [n, D],
// zero rows for ids outside the rows held.
template <class T>
void embedding_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const T* w = in[0].data<T>();
  const std::int64_t* id = in[1].data<std::int64_t>();
  T* y = out[0].data<T>();
  const std::int64_t v = in[0].shape()[0], d = in[0].shape()[1], n = in[1].numel(), first = attrs.get_int("first");
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = id[i] - first;
    if (row >= 0 && row < v) std::copy(w + row * d, w + (row + 1) * d, y + i * d);
    else std::fill(y + i * d, y + (i + 1) * d, T{});
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("embedding", embedding_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("embedding", embedding_kernel);

// in: grad [n*D] dense, ids i64 dense; out: dw [V, D] (zeroed here), the rows from attribute
// "first" of the table's gradient (ids outside them add nothing). bf16 and f16 rows of the
// gradient are summed in f32 and dw rounded once.
template <class T>
void embedding_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using C = cpu::ComputeType<T>;
  const T* g = in[0].data<T>();
  const std::int64_t* id = in[1].data<std::int64_t>();
  T* dw = out[0].data<T>();
  const std::int64_t v = out[0].shape()[0], d = out[0].shape()[1], n = in[1].numel(), first = attrs.get_int("first");
  std::vector<float> wide;
  C* sums = nullptr;
  if constexpr (cpu::kLowPrecision<T>) {
    wide.assign(static_cast<std::size_t>(out[0].numel()), 0.0f);
    sums = wide.data();
  } else {
    std::fill(dw, dw + out[0].numel(), T(0));
    sums = dw;
  }
  cpu::RowIn<T> row_in(d);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = id[i] - first;
    if (row < 0 || row >= v) continue;
    const C* gr = row_in(g + i * d);
    for (std::int64_t j = 0; j < d; ++j) sums[row * d + j] += gr[j];
  }
  if constexpr (cpu::kLowPrecision<T>) cpu::convert_run(wide.data(), dw, out[0].numel());
}
TROUPE_REGISTER_FLOAT_KERNELS("embedding_backward", embedding_backward_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("embedding_backward", embedding_backward_kernel);

}  // namespace
}  // namespace troupe
