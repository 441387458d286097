#pragma once
// The one loop nest every elementwise CPU kernel uses: walks a shape in row-major order over N
// operands with their own strides (0 for broadcast dims), merging dims that are laid out
// contiguously so dense tensors become a single flat inner loop.

#include <array>
#include <cstdint>

#include "troupe/kernels/shape.hpp"

namespace troupe::cpu {

/// Calls inner(offsets, inner_strides, n) once per innermost run: offsets[k] is the element offset
/// of operand k at the start of the run, inner_strides[k] its step, n the run length.
template <std::size_t N, class Inner>
void for_each_run(const Shape& shape, const std::array<const Strides*, N>& strides, Inner&& inner) {
  // Coalesce: dims (i, i+1) merge when every operand steps over them as one dim.
  Shape dims;
  std::array<Strides, N> st;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;  // size-1 dims contribute nothing to the walk
    bool merge = !dims.empty();
    for (std::size_t k = 0; k < N && merge; ++k)
      merge = st[k].back() == (*strides[k])[i] * shape[i];
    if (merge) {
      dims.back() *= shape[i];
      for (std::size_t k = 0; k < N; ++k) st[k].back() = (*strides[k])[i];
    } else {
      dims.push_back(shape[i]);
      for (std::size_t k = 0; k < N; ++k) st[k].push_back((*strides[k])[i]);
    }
  }
  for (auto d : shape)
    if (d == 0) return;
  std::array<std::int64_t, N> off{};
  std::array<std::int64_t, N> step{};
  if (dims.empty()) {
    inner(off, step, std::int64_t{1});
    return;
  }
  const std::size_t last = dims.size() - 1;
  for (std::size_t k = 0; k < N; ++k) step[k] = st[k][last];
  std::int64_t outer = 1;
  for (std::size_t i = 0; i < last; ++i) outer *= dims[i];
  Shape idx(last, 0);
  for (std::int64_t o = 0; o < outer; ++o) {
    inner(off, step, dims[last]);
    // Odometer increment over the outer dims, updating offsets incrementally.
    for (std::size_t i = last; i-- > 0;) {
      ++idx[i];
      for (std::size_t k = 0; k < N; ++k) off[k] += st[k][i];
      if (idx[i] < dims[i]) break;
      for (std::size_t k = 0; k < N; ++k) off[k] -= st[k][i] * dims[i];
      idx[i] = 0;
    }
  }
}

/// Strides of `t_shape`/`t_strides` seen through a broadcast to `out` (0 where broadcast).
inline Strides broadcast_strides(const Shape& t_shape, const Strides& t_strides, const Shape& out) {
  Strides s(out.size(), 0);
  const std::size_t lead = out.size() - t_shape.size();
  for (std::size_t i = 0; i < t_shape.size(); ++i)
    s[lead + i] = t_shape[i] == 1 ? 0 : t_strides[i];
  return s;
}

}  // namespace troupe::cpu
