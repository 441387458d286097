#pragma once
// The CUDA kernels' walk over strided and broadcast operands (as src/cpu/strided_loop.hpp is the
// CPU's): the output's shape and each operand's strides, and each element's offsets, for
// grid-stride loops over an output of up to kMaxDims dims.

#include <algorithm>
#include <vector>

#include "cuda/common.hpp"

namespace troupe::cuda {

/// The most dims a strided CUDA kernel walks.
constexpr int kMaxDims = 8;

/// The output's shape and the strides (in elements, 0 where broadcast) of the output and N inputs,
/// the output's first: a kernel argument, copied by value.
template <int N>
struct Geometry {
  int dims = 0;
  long long shape[kMaxDims] = {};
  long long strides[N + 1][kMaxDims] = {};
};

/// The geometry of `out` and `in` (N tensors, each broadcast to out's shape: its dims align with
/// out's last ones, and a dim of size 1 repeats); throws naming `op` past kMaxDims.
template <int N>
Geometry<N> geometry_of(const char* op, const Tensor& out, const Tensor* const (&in)[N]) {
  const int rank = static_cast<int>(out.dim());
  TROUPE_CHECK(rank <= kMaxDims, unsupported, op, " on CUDA handles up to ", kMaxDims, " dims, got ", out.str());
  Geometry<N> g;
  g.dims = rank;
  for (int d = 0; d < rank; ++d) {
    g.shape[d] = out.shape()[static_cast<std::size_t>(d)];
    g.strides[0][d] = out.strides()[static_cast<std::size_t>(d)];
  }
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *in[k];
    const int skip = rank - static_cast<int>(t.dim());
    for (int d = skip; d < rank; ++d) {
      const auto src = static_cast<std::size_t>(d - skip);
      g.strides[k + 1][d] = t.shape()[src] == 1 ? 0 : t.strides()[src];
    }
  }
  return g;
}

/// The offsets of element `i` (row-major in the output) in the output and each input.
template <int N>
__device__ inline void offsets_of(const Geometry<N>& g, long long i, long long (&offsets)[N + 1]) {
  for (int k = 0; k <= N; ++k) offsets[k] = 0;
  for (int d = g.dims - 1; d >= 0; --d) {
    const long long index = i % g.shape[d];
    i /= g.shape[d];
    for (int k = 0; k <= N; ++k) offsets[k] += index * g.strides[k][d];
  }
}

/// Blocks of kThreads for a grid-stride loop over n elements.
inline unsigned blocks_for(long long n) {
  return static_cast<unsigned>(std::max<long long>(1, std::min<long long>((n + kThreads - 1) / kThreads, 65535)));
}

}  // namespace troupe::cuda
