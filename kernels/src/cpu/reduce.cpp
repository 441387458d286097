// CPU reductions. The front end makes the input dense with the reduced axes in one run, so the
// kernel sees [outer, extent, inner] with the extent reduced.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"
#include "cpu/parallel.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe {
namespace {

// Outputs [i0, i1) of one [extent, inner] slab `p` reduced over `extent` into `q` (mode 0 sum,
// 1 mean, 2 max), through `acc` (i1 - i0 doubles). Each output's terms are added in the same order
// whatever the block, so any split of the outputs gives the same bits.
template <class T, class O>
TROUPE_VECTOR_CLONES void reduce_block(const T* p, O* q, std::int64_t extent, std::int64_t inner, std::int64_t i0,
                                       std::int64_t i1, std::int64_t mode, double* acc) {
  const std::int64_t w = i1 - i0;
  if (mode == 2) {
    // A NaN, once taken, is never replaced (nothing compares greater than it), so NaN propagates.
    std::fill(acc, acc + w, -std::numeric_limits<double>::infinity());
    for (std::int64_t j = 0; j < extent; ++j)
      for (std::int64_t i = 0; i < w; ++i) {
        const double v = to_double(p[j * inner + i0 + i]);
        double& m = acc[i];
        m = (v > m || v != v) && m == m ? v : m;
      }
    for (std::int64_t i = 0; i < w; ++i) q[i0 + i] = from_double<O>(acc[i]);
    return;
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
    std::fill(acc, acc + w, 0.0);
    for (std::int64_t j = 0; j < extent; ++j)
      for (std::int64_t i = 0; i < w; ++i) acc[i] += to_double(p[j * inner + i0 + i]);
  }
  const double scale = mode == 1 ? (extent > 0 ? 1.0 / static_cast<double>(extent) : std::numeric_limits<double>::quiet_NaN()) : 1.0;
  for (std::int64_t i = 0; i < w; ++i) q[i0 + i] = from_double<O>(acc[i] * scale);
}

// in[0]: dense [outer, extent, inner] of T, reduced over `extent`; out[0]: dense [outer, inner] of
// O; attrs "extent", "inner", "mode" (0 sum, 1 mean, 2 max). Working in the input's own layout (no
// transposed copy) keeps column sums such as bias gradients streaming through memory. Every dtype
// (f32, f64, bf16, f16) is read as it is stored and reduced in double, and the result is rounded
// once into O: the output's dtype, the input's or f32 (the partial sums of a bf16 reduction in
// several passes). The outputs split into tiles for the pool of cores: blocks of at least 256
// columns of one slab, or of whole slabs when each reduces to one value.
template <class T, class O>
void reduce_rows(const Tensor& in, const Tensor& out, const Attrs& a) {
  const T* x = in.data<T>();
  O* y = out.data<O>();
  const std::int64_t extent = a.get_int("extent"), inner = a.get_int("inner"), mode = a.get_int("mode");
  const std::int64_t outer = inner > 0 ? out.numel() / inner : 0;
  if (outer == 0) return;
  const std::int64_t span = std::max<std::int64_t>(1, extent);
  if (inner == 1) {
    cpu::parallel_rows(outer, span, 1.0, [&](std::int64_t begin, std::int64_t end) {
      double acc = 0;
      for (std::int64_t o = begin; o < end; ++o) reduce_block(x + o * extent, y + o, extent, 1, 0, 1, mode, &acc);
    });
    return;
  }
  const std::int64_t cols = std::min(inner, std::max<std::int64_t>(256, cpu::kElementTile / span));
  const std::int64_t blocks = (inner + cols - 1) / cols;
  cpu::parallel_tiles(outer * blocks, static_cast<double>(cols * span), [&](std::int64_t t) {
    const std::int64_t o = t / blocks, i0 = t % blocks * cols, i1 = std::min(inner, i0 + cols);
    std::vector<double> acc(static_cast<std::size_t>(i1 - i0));
    reduce_block(x + o * extent * inner, y + o * inner, extent, inner, i0, i1, mode, acc.data());
  });
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
