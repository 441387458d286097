#pragma once
// The element type a layer norm writes y in, for the CPU and CUDA kernels alike.

#include <type_traits>

#include "troupe/kernels/dtype.hpp"

namespace troupe {

/// Calls body(Y{}) with the element type y is written in: T, or bf16 or f16 for f32 rows whose y is
/// rounded once on the way out (the cast before a product under mixed precision, in the same pass).
template <class T, class Body>
void with_y_type(DType y, Body&& body) {
  if constexpr (std::is_same_v<T, float>) {
    if (y == DType::bf16) return body(BFloat16{});
    if (y == DType::f16) return body(Half{});
  }
  body(T{});
}

}  // namespace troupe
