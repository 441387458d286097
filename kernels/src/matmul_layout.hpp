#pragma once
// How a product's operands lie in memory, for the CPU (BLAS) and CUDA (cuBLAS) products alike:
// the last two dims as a row-major matrix (stored transposed or not, with its leading dimension)
// and each batch entry's offset, broadcasting.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// The last two dims of an operand as a row-major matrix: `trans` when it is stored transposed
/// (its columns dense), `ld` its leading dimension; `ok` is false when neither is dense (copy first).
struct MatrixLayout {
  bool ok = false;
  bool trans = false;
  std::int64_t ld = 0;
};

/// The layout of `t`'s last two dims.
inline MatrixLayout matrix_layout(const Tensor& t) {
  const int r = t.dim();
  const std::int64_t rows = t.shape()[static_cast<std::size_t>(r - 2)], cols = t.shape()[static_cast<std::size_t>(r - 1)];
  const std::int64_t s0 = t.strides()[static_cast<std::size_t>(r - 2)], s1 = t.strides()[static_cast<std::size_t>(r - 1)];
  if ((s1 == 1 || cols == 1) && s0 >= std::max<std::int64_t>(cols, 1)) return {true, false, s0};
  if ((s0 == 1 || rows == 1) && s1 >= std::max<std::int64_t>(rows, 1)) return {true, true, s1};
  return {};
}

/// The batch dims of t: all but the last two.
inline Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

/// The batch offsets (in elements) of operand `t` for each entry of `batch`, broadcasting.
inline std::vector<std::int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  const Shape tb = batch_of(t);
  const Strides ts(t.strides().begin(), t.strides().end() - 2);
  const std::size_t lead = batch.size() - tb.size();
  std::vector<std::int64_t> offs(static_cast<std::size_t>(shape_numel(batch)), 0);
  for (std::size_t i = 0; i < offs.size(); ++i) {
    std::int64_t rem = static_cast<std::int64_t>(i), off = 0;
    for (std::size_t d = batch.size(); d-- > 0;) {
      const std::int64_t idx = rem % batch[d];
      rem /= batch[d];
      if (d >= lead && tb[d - lead] != 1) off += idx * ts[d - lead];
    }
    offs[i] = off;
  }
  return offs;
}

}  // namespace troupe::kernels
