#include "troupe/kernels/allocator.hpp"

#include <cstdlib>
#include <new>

#include "troupe/kernels/error.hpp"

namespace troupe {

std::size_t CachingCpuAllocator::block_size(std::size_t bytes) {
  if (bytes <= 512) return (bytes + alignment - 1) / alignment * alignment + (bytes == 0 ? alignment : 0);
  // Four classes per power of two: round up to a multiple of a quarter of the top power.
  std::size_t top = 1;
  while (top * 2 <= bytes) top *= 2;
  const std::size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

CachingCpuAllocator::~CachingCpuAllocator() { empty_cache(); }

void* CachingCpuAllocator::allocate(std::size_t bytes) {
  const std::size_t size = block_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= size;
      stats_.current_bytes += size;
      stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
      return p;
    }
  }
  void* p = std::aligned_alloc(alignment, size);
  if (!p) {
    // The cache may hold enough memory: give it back and try once more before failing.
    empty_cache();
    p = std::aligned_alloc(alignment, size);
  }
  TROUPE_CHECK(p != nullptr, runtime, "out of host memory allocating ", bytes, " bytes");
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.system_allocations;
  stats_.current_bytes += size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  return p;
}

void CachingCpuAllocator::deallocate(void* p, std::size_t bytes) {
  if (!p) return;
  const std::size_t size = block_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  free_blocks_[size].push_back(p);
  stats_.current_bytes -= size;
  stats_.cached_bytes += size;
}

AllocatorStats CachingCpuAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingCpuAllocator::reset_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.requests = 0;
  stats_.system_allocations = 0;
}

void CachingCpuAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_blocks_)
    for (void* p : blocks) std::free(p);
  free_blocks_.clear();
  stats_.cached_bytes = 0;
}

CachingCpuAllocator& cpu_allocator() {
  // Never destroyed: tensors held by static objects may be freed after main returns.
  static auto* instance = new CachingCpuAllocator();
  return *instance;
}

}  // namespace troupe

#include "device_backend.hpp"

namespace troupe {

Allocator& allocator_for(const Device& device) {
  return device.is_cpu() ? static_cast<Allocator&>(cpu_allocator()) : detail::cuda_allocator(device.index);
}

}  // namespace troupe
