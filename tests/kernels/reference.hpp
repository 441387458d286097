#pragma once
// Shared helpers of the kernel tests: random tensors from a fixed seed and comparison against
// double-precision references.

#include <cstdint>
#include <vector>

#include "troupe/kernels/tensor.hpp"

namespace troupe::test {

/// A host f32 tensor of `shape` with values uniform in [low, high), from `seed`.
Tensor random_tensor(const Shape& shape, std::uint64_t seed, double low = -1.0, double high = 1.0);
/// The elements of any host or device tensor (any dtype, any layout) as doubles, row-major.
std::vector<double> values(const Tensor& t);
/// Asserts (gtest) that `actual` has `shape` and matches `expected` within atol + rtol * |expected|.
void expect_close(const Tensor& actual, const std::vector<double>& expected, const Shape& shape, double rtol = 1e-5,
                  double atol = 1e-6);
/// max |actual - expected| / max |expected|: the error relative to the tensor's scale (elementwise
/// relative error is meaningless for values that are zero up to rounding).
double scaled_max_error(const Tensor& actual, const Tensor& expected);
/// Row-major multi-index of flat position `i` in `shape`.
std::vector<std::int64_t> unravel(std::int64_t i, const Shape& shape);

}  // namespace troupe::test
