// CPU reductions. The front end makes the input dense with the reduced axes in one run, so the
// kernel sees [outer, extent, inner] with the extent reduced.

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"

namespace troupe {
namespace {

// in[0]: dense [outer, extent, inner], reduced over `extent`; out[0]: dense [outer, inner]; attrs
// "extent", "inner", "mode" (0 sum, 1 mean, 2 max). Working in the input's own layout (no transposed
// copy) keeps column sums such as bias gradients streaming through memory. Sums accumulate in double.
template <class T>
TROUPE_VECTOR_CLONES void reduce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const T* x = in[0].data<T>();
  T* y = out[0].data<T>();
  const std::int64_t extent = a.get_int("extent"), inner = a.get_int("inner"), mode = a.get_int("mode");
  const std::int64_t outer = inner > 0 ? out[0].numel() / inner : 0;
  std::vector<double> acc(static_cast<std::size_t>(inner));
  for (std::int64_t o = 0; o < outer; ++o) {
    const T* p = x + o * extent * inner;
    T* q = y + o * inner;
    if (mode == 2) {
      // A NaN, once taken, is never replaced (nothing compares greater than it), so NaN propagates.
      for (std::int64_t i = 0; i < inner; ++i) q[i] = -std::numeric_limits<T>::infinity();
      for (std::int64_t j = 0; j < extent; ++j)
        for (std::int64_t i = 0; i < inner; ++i) {
          const T v = p[j * inner + i];
          q[i] = (v > q[i] || v != v) && q[i] == q[i] ? v : q[i];
        }
      continue;
    }
    if (inner == 1) {
      // Eight partial sums break the add-latency chain of one running sum, and vectorise.
      double lanes[8] = {};
      std::int64_t j = 0;
      for (; j + 8 <= extent; j += 8)
        for (int l = 0; l < 8; ++l) lanes[l] += p[j + l];
      double total = 0;
      for (; j < extent; ++j) total += p[j];
      for (double l : lanes) total += l;
      acc[0] = total;
    } else {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t j = 0; j < extent; ++j)
        for (std::int64_t i = 0; i < inner; ++i) acc[static_cast<std::size_t>(i)] += p[j * inner + i];
    }
    const double scale = mode == 1 ? (extent > 0 ? 1.0 / static_cast<double>(extent) : std::numeric_limits<double>::quiet_NaN()) : 1.0;
    for (std::int64_t i = 0; i < inner; ++i) q[i] = static_cast<T>(acc[static_cast<std::size_t>(i)] * scale);
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("reduce", reduce_kernel);

}  // namespace
}  // namespace troupe
