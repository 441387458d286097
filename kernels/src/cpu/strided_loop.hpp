#pragma once
// The one loop nest every elementwise CPU kernel uses: walks a shape in row-major order over N
// operands with their own strides (0 for broadcast dims), merging dims that are laid out
// contiguously so dense tensors become a single flat inner loop.

#include <algorithm>
#include <array>
#include <cstdint>

#include "cpu/parallel.hpp"
#include "troupe/kernels/shape.hpp"

namespace troupe::cpu {

/// A shape's row-major walk over N operands with their own strides, dims laid out contiguously for
/// every operand merged into one, so dense tensors become a single flat run.
template <std::size_t N>
class RunWalk {
 public:
  RunWalk(const Shape& shape, const std::array<const Strides*, N>& strides) {
    // Coalesce: dims (i, i+1) merge when every operand steps over them as one dim.
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0) numel_ = 0;
      if (shape[i] == 1) continue;  // size-1 dims contribute nothing to the walk
      bool merge = !dims_.empty();
      for (std::size_t k = 0; k < N && merge; ++k) merge = st_[k].back() == (*strides[k])[i] * shape[i];
      if (merge) {
        dims_.back() *= shape[i];
        for (std::size_t k = 0; k < N; ++k) st_[k].back() = (*strides[k])[i];
      } else {
        dims_.push_back(shape[i]);
        for (std::size_t k = 0; k < N; ++k) st_[k].push_back((*strides[k])[i]);
      }
    }
    if (numel_ != 0)
      for (auto d : dims_) numel_ *= d;
  }

  /// Elements walked.
  std::int64_t numel() const { return numel_; }

  /// Calls inner(offsets, inner_strides, n) for each innermost run (or part of one) of elements
  /// [begin, end) in row-major order: offsets[k] is operand k's element offset at the run's start,
  /// inner_strides[k] its step, n the run's length.
  template <class Inner>
  void walk(std::int64_t begin, std::int64_t end, Inner&& inner) const {
    std::array<std::int64_t, N> off{};
    std::array<std::int64_t, N> step{};
    if (begin >= end) return;
    if (dims_.empty()) {
      inner(off, step, std::int64_t{1});
      return;
    }
    const std::size_t last = dims_.size() - 1;
    for (std::size_t k = 0; k < N; ++k) step[k] = st_[k][last];
    // The odometer at `begin`.
    Shape idx(dims_.size(), 0);
    for (std::int64_t rest = begin, i = static_cast<std::int64_t>(last); i >= 0; --i) {
      const auto u = static_cast<std::size_t>(i);
      idx[u] = rest % dims_[u];
      rest /= dims_[u];
      for (std::size_t k = 0; k < N; ++k) off[k] += idx[u] * st_[k][u];
    }
    for (std::int64_t at = begin; at < end;) {
      const std::int64_t n = std::min(dims_[last] - idx[last], end - at);
      inner(off, step, n);
      at += n;
      if (at >= end) break;
      // To the start of the next run, then the odometer over the outer dims.
      for (std::size_t k = 0; k < N; ++k) off[k] -= idx[last] * st_[k][last];
      idx[last] = 0;
      for (std::size_t i = last; i-- > 0;) {
        ++idx[i];
        for (std::size_t k = 0; k < N; ++k) off[k] += st_[k][i];
        if (idx[i] < dims_[i]) break;
        for (std::size_t k = 0; k < N; ++k) off[k] -= st_[k][i] * dims_[i];
        idx[i] = 0;
      }
    }
  }

 private:
  Shape dims_;
  std::array<Strides, N> st_;
  std::int64_t numel_ = 1;
};

/// Calls inner(offsets, inner_strides, n) once per innermost run: offsets[k] is the element offset
/// of operand k at the start of the run, inner_strides[k] its step, n the run length.
template <std::size_t N, class Inner>
void for_each_run(const Shape& shape, const std::array<const Strides*, N>& strides, Inner&& inner) {
  const RunWalk<N> w(shape, strides);
  w.walk(0, w.numel(), inner);
}

/// for_each_run split into tiles of kElementTile elements (runs cut at tile edges), run by this
/// thread and the idle cores; `element_work` is one element's cost in about nanoseconds. Inner
/// must be safe to call from several threads at once on different elements.
template <std::size_t N, class Inner>
void parallel_for_each_run(const Shape& shape, const std::array<const Strides*, N>& strides, double element_work,
                           Inner&& inner) {
  const RunWalk<N> w(shape, strides);
  parallel_ranges(w.numel(), kElementTile, element_work,
                  [&](std::int64_t begin, std::int64_t end) { w.walk(begin, end, inner); });
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
