#pragma once
// What the CUDA backend files share: turning a CUDA status into a Troupe error, the block size of
// the kernels, and the operand check of kernels that do not broadcast yet.

#include <cuda_runtime.h>

#include <vector>

#include "troupe/kernels/error.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::cuda {

/// Threads per block of the CUDA kernels.
constexpr int kThreads = 256;

/// Throws a runtime Error naming `what` when `rc` is not cudaSuccess.
inline void check_cuda(cudaError_t rc, const char* what) {
  TROUPE_CHECK(rc == cudaSuccess, runtime, what, " failed: ", cudaGetErrorString(rc));
}

/// Refuses inputs that are not dense or not all of one shape, for kernels without strided or
/// broadcast support yet.
inline void require_dense_equal(const char* op, const std::vector<Tensor>& in) {
  for (const auto& t : in)
    TROUPE_CHECK(t.is_contiguous() && t.shape() == in[0].shape(), unsupported, op,
                 " on CUDA needs dense inputs of equal shape for now, got ", t.str(), " and ", in[0].str());
}

}  // namespace troupe::cuda
