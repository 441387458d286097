// CPU reductions. The front end makes the input dense with the reduced axes in one run, so the
// kernel sees [outer, extent, inner] with the extent reduced.

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe {
namespace {

// in[0]: dense [outer, extent, inner] of T, reduced over `extent`; out[0]: dense [outer, inner] of
// O; attrs "extent", "inner", "mode" (0 sum, 1 mean, 2 max). Working in the input's own layout (no
// transposed copy) keeps column sums such as bias gradients streaming through memory. Every dtype
// (f32, f64, bf16, f16) is read as it is stored and reduced in double, and the result is rounded
// once into O: the output's dtype, the input's or f32 (the partial sums of a bf16 reduction in
// several passes).
template <class T, class O>
TROUPE_VECTOR_CLONES void reduce_rows(const Tensor& in, const Tensor& out, const Attrs& a) {
  const T* x = in.data<T>();
  O* y = out.data<O>();
  const std::int64_t extent = a.get_int("extent"), inner = a.get_int("inner"), mode = a.get_int("mode");
  const std::int64_t outer = inner > 0 ? out.numel() / inner : 0;
  std::vector<double> acc(static_cast<std::size_t>(inner));
  for (std::int64_t o = 0; o < outer; ++o) {
    const T* p = x + o * extent * inner;
    O* q = y + o * inner;
    if (mode == 2) {
      // A NaN, once taken, is never replaced (nothing compares greater than it), so NaN propagates.
      std::fill(acc.begin(), acc.end(), -std::numeric_limits<double>::infinity());
      for (std::int64_t j = 0; j < extent; ++j)
        for (std::int64_t i = 0; i < inner; ++i) {
          const double v = to_double(p[j * inner + i]);
          double& m = acc[static_cast<std::size_t>(i)];
          m = (v > m || v != v) && m == m ? v : m;
        }
      for (std::int64_t i = 0; i < inner; ++i) q[i] = from_double<O>(acc[static_cast<std::size_t>(i)]);
      continue;
    }
    if (inner == 1) {
      // Eight partial sums break the add-latency chain of one running sum, and vectorise.
      double lanes[8] = {};
      std::int64_t j = 0;
      for (; j + 8 <= extent; j += 8)
        for (int l = 0; l < 8; ++l) lanes[l] += to_double(p[j + l]);
      double total = 0;
      for (; j < extent; ++j) total += to_double(p[j]);
      for (double l : lanes) total += l;
      acc[0] = total;
    } else {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t j = 0; j < extent; ++j)
        for (std::int64_t i = 0; i < inner; ++i) acc[static_cast<std::size_t>(i)] += to_double(p[j * inner + i]);
    }
    const double scale = mode == 1 ? (extent > 0 ? 1.0 / static_cast<double>(extent) : std::numeric_limits<double>::quiet_NaN()) : 1.0;
    for (std::int64_t i = 0; i < inner; ++i) q[i] = from_double<O>(acc[static_cast<std::size_t>(i)] * scale);
  }
}

// The reduction of a T input into an output of T's dtype, or of f32 (for bf16 and f16 partial sums)
// or bf16 / f16 (the last pass over such partial sums of an f32 input).
template <class T>
void reduce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  visit_dtype(out[0].dtype(), [&](auto tag) {
    using O = decltype(tag);
    if constexpr (std::is_same_v<O, T> || std::is_same_v<O, float> || std::is_same_v<O, BFloat16> ||
                  std::is_same_v<O, Half>)
      reduce_rows<T, O>(in[0], out[0], a);
    else
      fail(ErrorKind::dtype_mismatch, "reduce: a ", dtype_name(in[0].dtype()), " input cannot be reduced into ",
           dtype_name(out[0].dtype()));
  });
}
TROUPE_REGISTER_FLOAT_KERNELS("reduce", reduce_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("reduce", reduce_kernel);

}  // namespace
}  // namespace troupe
