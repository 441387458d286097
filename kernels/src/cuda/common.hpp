#pragma once
// What the CUDA backend files share: the launch stream, turning a CUDA status into a Troupe error,
// the block size of the kernels, and the operand check of kernels that do not broadcast yet.

#include <cuda_runtime.h>

#include <vector>

#include "troupe/kernels/error.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::cuda {

/// Threads per block of the CUDA kernels.
constexpr int kThreads = 256;

/// The stream this thread's CUDA kernels and copies launch on: a CUDA Stream's while it runs its
/// work (troupe/kernels/stream.hpp), else null, the legacy default stream.
cudaStream_t launch_stream();

/// Makes `stream` the thread's launch stream while it lives (the CUDA Stream's work runs under one).
class LaunchOn {
 public:
  explicit LaunchOn(cudaStream_t stream);
  ~LaunchOn();
  LaunchOn(const LaunchOn&) = delete;
  LaunchOn& operator=(const LaunchOn&) = delete;

 private:
  cudaStream_t previous_;
};

/// Checks the launch of `what`; outside a stream also waits for it, since such callers read the
/// results at once.
void finish_launch(const char* what);

/// Throws a runtime Error naming `what` when `rc` is not cudaSuccess.
inline void check_cuda(cudaError_t rc, const char* what) {
  TROUPE_CHECK(rc == cudaSuccess, runtime, what, " failed: ", cudaGetErrorString(rc));
}

/// Device memory a kernel needs for itself (partial sums, wide accumulators), taken and given back
/// in the launch stream's order (cudaMallocAsync / cudaFreeAsync), so it stays valid for the
/// kernels queued before its release even when the call returns first.
class Scratch {
 public:
  explicit Scratch(std::size_t bytes) {
    check_cuda(cudaMallocAsync(&data_, bytes, launch_stream()), "cudaMallocAsync");
  }
  ~Scratch() { cudaFreeAsync(data_, launch_stream()); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  /// The memory as T elements.
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

/// Refuses inputs that are not dense or not all of one shape, for kernels without strided or
/// broadcast support yet.
inline void require_dense_equal(const char* op, const std::vector<Tensor>& in) {
  for (const auto& t : in)
    TROUPE_CHECK(t.is_contiguous() && t.shape() == in[0].shape(), unsupported, op,
                 " on CUDA needs dense inputs of equal shape for now, got ", t.str(), " and ", in[0].str());
}

}  // namespace troupe::cuda
