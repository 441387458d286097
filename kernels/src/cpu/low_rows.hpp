#pragma once
// Rows of bf16 or f16 for the row kernels (softmax, layer norm, cross-entropy, attention): each row
// is widened to f32 in a scratch buffer that stays in cache, computed by the f32 kernel's own row
// code, and rounded once on the way out. The result is the f32 kernel's on the widened inputs,
// rounded, without an f32 copy of the tensor in memory. For f32 and f64 rows both are the identity.

#include <cstdint>
#include <type_traits>
#include <vector>

#include "cpu/convert.hpp"

namespace troupe::cpu {

/// True for the low-precision element types, bf16 and f16.
template <class T>
inline constexpr bool kLowPrecision = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

/// The type a kernel of element type T computes in: T itself for f32 and f64, f32 for bf16 and f16.
template <class T>
using ComputeType = std::conditional_t<kLowPrecision<T>, float, T>;

/// Reads rows of `width` elements of T as ComputeType<T>: the row itself, or its widened copy.
template <class T>
class RowIn {
 public:
  explicit RowIn(std::int64_t width) : width_(width) {
    if constexpr (kLowPrecision<T>) wide_.resize(static_cast<std::size_t>(width));
  }
  /// The row at `row` as ComputeType<T>; valid until the next call.
  const ComputeType<T>* operator()(const T* row) {
    if constexpr (kLowPrecision<T>) {
      convert_run(row, wide_.data(), width_);
      return wide_.data();
    } else {
      return row;
    }
  }

 private:
  std::int64_t width_;
  std::vector<float> wide_;
};

/// Writes rows of `width` elements of T computed as ComputeType<T>: at() is where to compute the
/// row (the row itself, or scratch), store() rounds the scratch into it.
template <class T>
class RowOut {
 public:
  explicit RowOut(std::int64_t width) : width_(width) {
    if constexpr (kLowPrecision<T>) wide_.resize(static_cast<std::size_t>(width));
  }
  /// Where the row at `row` is computed.
  ComputeType<T>* at(T* row) {
    if constexpr (kLowPrecision<T>) return wide_.data();
    else return row;
  }
  /// Rounds what at() gave into the row at `row` (nothing to do for f32 and f64).
  void store(T* row) {
    if constexpr (kLowPrecision<T>) convert_run(wide_.data(), row, width_);
  }

 private:
  std::int64_t width_;
  std::vector<float> wide_;
};

}  // namespace troupe::cpu
