#include "troupe/kernels/shape.hpp"

#include "troupe/kernels/error.hpp"

namespace troupe {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) {
    TROUPE_CHECK(d >= 0, invalid_argument, "shape ", shape_str(s), ": sizes must be >= 0");
    TROUPE_CHECK(!__builtin_mul_overflow(n, d, &n), invalid_argument, "shape ", shape_str(s),
                 " has more elements than fit in a 64-bit count");
  }
  return n;
}

std::size_t shape_nbytes(const Shape& s, std::size_t element_size) {
  std::size_t bytes = 0;
  TROUPE_CHECK(!__builtin_mul_overflow(static_cast<std::size_t>(shape_numel(s)), element_size, &bytes),
               invalid_argument, "shape ", shape_str(s), " with ", element_size,
               "-byte elements needs more bytes than fit in a 64-bit size");
  return bytes;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  std::int64_t step = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = step;
    step *= s[i];
  }
  return st;
}

int normalize_axis(std::int64_t axis, std::size_t rank, const char* op) {
  const auto r = static_cast<std::int64_t>(rank);
  TROUPE_CHECK(axis >= -r && axis < r, invalid_argument, op, ": axis ", axis, " is out of range for a tensor of rank ",
               rank, " (valid: ", -r, " to ", r - 1, ")");
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    TROUPE_CHECK(da == db || da == 1 || db == 1, shape_mismatch, op, ": shapes ", shape_str(a), " and ",
                 shape_str(b), " cannot be broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace troupe
