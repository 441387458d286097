#include "troupe/kernels/dropout.hpp"

#include <algorithm>
#include <cmath>

#include "troupe/kernels/error.hpp"
#include "troupe/kernels/rng.hpp"

namespace troupe::kernels {

DropoutStream::DropoutStream(const RandomPosition& at, std::uint64_t site, double p) : p_(p) {
  TROUPE_CHECK(std::isfinite(p) && p >= 0 && p < 1, invalid_argument, "dropout probability ", p,
               " is outside [0, 1); give --dropout between 0 and 1");
  // One key per (seed, step, site): the counters then only say where the element is.
  const auto words = philox4x32({static_cast<std::uint32_t>(at.step), static_cast<std::uint32_t>(at.step >> 32),
                                 static_cast<std::uint32_t>(site), static_cast<std::uint32_t>(site >> 32)},
                                at.seed);
  key_ = static_cast<std::uint64_t>(words[0]) | static_cast<std::uint64_t>(words[1]) << 32;
  threshold_ = static_cast<std::uint32_t>(std::min(4294967295.0, std::round(p * 4294967296.0)));
  scale_ = static_cast<float>(1.0 / (1.0 - p));
}

std::array<float, 4> DropoutStream::factors(std::int64_t row, std::int64_t column, std::int64_t inner) const {
  const auto block = static_cast<std::uint64_t>(inner) >> 2;
  const auto words = philox4x32({static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                                 static_cast<std::uint32_t>(column), static_cast<std::uint32_t>(row)},
                                key_);
  std::array<float, 4> out;
  for (int j = 0; j < 4; ++j) out[j] = words[j] < threshold_ ? 0.0f : scale_;
  return out;
}

void DropoutStream::fill(std::int64_t row, std::int64_t column, std::int64_t inner, std::int64_t n, float* f) const {
  std::int64_t e = inner;
  while (e < inner + n) {
    const std::array<float, 4> block = factors(row, column, e & ~std::int64_t{3});
    for (std::int64_t j = e & 3; j < 4 && e < inner + n; ++j, ++e) f[e - inner] = block[static_cast<std::size_t>(j)];
  }
}

Tensor dropout_mask(const Shape& shape, DType dtype, double p, std::uint64_t site, const RandomPosition& at,
                    std::int64_t row_offset, std::int64_t column_offset) {
  TROUPE_CHECK(!shape.empty(), shape_mismatch, "dropout: a scalar has no rows to drop; give a tensor of rank 1 or more");
  const DropoutStream stream(at, site, p);
  const std::int64_t rows = shape[0], columns = shape.size() > 1 ? shape[1] : 1, inner = shape_numel(shape) / std::max<std::int64_t>(1, rows * columns);
  Tensor mask = Tensor::empty(shape, DType::f32);
  float* out = mask.data<float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < columns; ++c)
      stream.fill(at.first_row + row_offset + r, column_offset + c, 0, inner, out + (r * columns + c) * inner);
  return dtype == DType::f32 ? mask : mask.to(dtype);
}

}  // namespace troupe::kernels
