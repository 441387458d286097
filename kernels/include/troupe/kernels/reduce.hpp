#pragma once
// Reductions over axes: sum, mean, max, and sum_to_shape (the gradient of a broadcast).

#include <cstdint>
#include <vector>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Sum over `axes` (empty = all axes); keepdim keeps reduced dims as size 1.
Tensor sum(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim = false);
/// Mean over `axes` (empty = all axes); keepdim keeps reduced dims as size 1.
Tensor mean(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim = false);
/// Maximum value over `axes` (empty = all axes); keepdim keeps reduced dims as size 1.
Tensor max(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim = false);
/// Sums a broadcast result `x` back down to `shape` (which must broadcast to x.shape()).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

}  // namespace troupe::kernels
