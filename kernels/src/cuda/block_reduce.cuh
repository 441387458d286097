#pragma once
// The row kernels' meeting point: a block of kThreads threads working on one row adds up (or takes
// the maximum of) one value per thread in shared memory.

#include "cuda/common.hpp"

namespace troupe::cuda {

/// What block_reduce combines.
enum class Combine { sum, max };

/// The block's sum, or NaN-ignoring maximum, of every thread's v, returned to all threads. Every
/// thread of the block must call it (it synchronises).
template <class C>
__device__ C block_reduce(C v, Combine how) {
  __shared__ C part[kThreads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const C a = part[threadIdx.x], b = part[threadIdx.x + stride];
      part[threadIdx.x] = how == Combine::sum ? a + b : fmax(a, b);
    }
    __syncthreads();
  }
  const C r = part[0];
  __syncthreads();  // part is reused by the next call
  return r;
}

}  // namespace troupe::cuda
