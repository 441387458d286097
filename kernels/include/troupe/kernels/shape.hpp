#pragma once
// Shapes and strides (in elements) and the helpers every op uses to check them.

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

/// Sizes of a tensor's dimensions, outermost first.
using Shape = std::vector<std::int64_t>;
/// Element steps between neighbours along each dimension.
using Strides = std::vector<std::int64_t>;

/// "[2, 3, 4]": how shapes appear in error messages and dumps.
std::string shape_str(const Shape& s);
/// Number of elements of a shape (1 for a scalar shape []); throws for a negative size or a count
/// that does not fit in int64 (shapes read from files can be anything).
std::int64_t shape_numel(const Shape& s);
/// Bytes a dense tensor of shape `s` with elements of `element_size` bytes needs; throws when that
/// overflows.
std::size_t shape_nbytes(const Shape& s, std::size_t element_size);
/// Row-major strides of a dense tensor of shape `s`.
Strides contiguous_strides(const Shape& s);
/// Maps a possibly negative `axis` into [0, rank); `op` names the caller in the error.
int normalize_axis(std::int64_t axis, std::size_t rank, const char* op);
/// NumPy broadcast of two shapes; throws a shape_mismatch Error naming `op` if they do not fit.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace troupe
