// The CUDA device backend: a caching device allocator per GPU and byte copies across devices.
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/common.hpp"
#include "device_backend.hpp"
#include "troupe/kernels/cuda.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe {

namespace {

using cuda::check_cuda;

// Caches freed device blocks by exact size, like the host allocator, so steps stop calling cudaMalloc.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}

  void* allocate(std::size_t bytes) override {
    const std::size_t size = CachingCpuAllocator::block_size(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    auto& blocks = free_[size];
    void* p = nullptr;
    if (!blocks.empty()) {
      p = blocks.back();
      blocks.pop_back();
      stats_.cached_bytes -= size;
    } else {
      check_cuda(cudaSetDevice(index_), "cudaSetDevice");
      if (cudaMalloc(&p, size) != cudaSuccess) {
        (void)cudaGetLastError();
        release_cache();  // the cache may hold enough memory: free it and try once more
        check_cuda(cudaMalloc(&p, size), "cudaMalloc");
      }
      ++stats_.system_allocations;
    }
    stats_.current_bytes += size;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    return p;
  }

  void deallocate(void* p, std::size_t bytes) override {
    if (!p) return;
    const std::size_t size = CachingCpuAllocator::block_size(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    free_[size].push_back(p);
    stats_.current_bytes -= size;
    stats_.cached_bytes += size;
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_bytes = stats_.current_bytes;
    stats_.requests = stats_.system_allocations = 0;
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cache();
  }

  Device device() const override { return Device::cuda(index_); }

 private:
  void release_cache() {
    cudaSetDevice(index_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) cudaFree(p);
    free_.clear();
    stats_.cached_bytes = 0;
  }

  int index_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

}  // namespace

bool cuda_built() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: report none
    return 0;
  }
  return n;
}

namespace detail {

Allocator& cuda_allocator(int index) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<CudaAllocator>>* allocators = new std::vector<std::unique_ptr<CudaAllocator>>();
  const int count = cuda_device_count();
  TROUPE_CHECK(index >= 0 && index < count, device_mismatch, "cuda:", index, " requested, but this machine has ",
               count, " CUDA device(s)");
  std::lock_guard<std::mutex> lock(mutex);
  if (allocators->size() <= static_cast<std::size_t>(index)) allocators->resize(static_cast<std::size_t>(count));
  auto& slot = (*allocators)[static_cast<std::size_t>(index)];
  if (!slot) slot = std::make_unique<CudaAllocator>(index);
  return *slot;
}

// On a CUDA Stream's launch stream the copy is queued there (the Stream keeps both tensors until it
// has run); otherwise it finishes before returning.
void copy_bytes_between_devices(void* dst, const Device&, const void* src, const Device&, std::size_t bytes) {
  if (const cudaStream_t stream = cuda::launch_stream())
    return check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

}  // namespace detail

}  // namespace troupe
