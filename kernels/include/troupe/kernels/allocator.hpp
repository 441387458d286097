#pragma once
// Memory for tensor storage: a caching, 64-byte-aligned CPU pool that reuses blocks across steps
// and keeps the statistics monitoring reads (current, peak, system allocations).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "troupe/kernels/device.hpp"

namespace troupe {

/// Counters of one allocator; bytes are the rounded block sizes handed to tensors.
struct AllocatorStats {
  std::size_t current_bytes = 0;       // in use by live tensors now
  std::size_t peak_bytes = 0;          // highest current_bytes since the last reset
  std::size_t cached_bytes = 0;        // freed by tensors, kept for reuse
  std::uint64_t requests = 0;          // allocate() calls since the last reset
  std::uint64_t system_allocations = 0;  // requests that had to go to the system since the last reset
};

/// Interface of a device memory allocator.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Returns a block of at least `bytes` bytes (never null; throws troupe::Error when out of memory).
  virtual void* allocate(std::size_t bytes) = 0;
  /// Returns a block obtained from allocate(bytes) with the same `bytes`.
  virtual void deallocate(void* p, std::size_t bytes) = 0;
  /// A snapshot of the counters.
  virtual AllocatorStats stats() const = 0;
  /// Sets peak to current and zeroes the request counters (e.g. at the start of a step).
  virtual void reset_stats() = 0;
  /// Gives every cached, unused block back to the system.
  virtual void empty_cache() = 0;
  /// The device whose memory this allocator hands out.
  virtual Device device() const = 0;
};

/// Thread-safe caching allocator for host memory: blocks are 64-byte aligned and sized in classes
/// (four per power of two, so at most 25% slack), and a freed block waits in its class for reuse.
class CachingCpuAllocator final : public Allocator {
 public:
  /// Alignment of every block: one cache line, enough for AVX-512 loads.
  static constexpr std::size_t alignment = 64;

  CachingCpuAllocator() = default;
  ~CachingCpuAllocator() override;
  CachingCpuAllocator(const CachingCpuAllocator&) = delete;
  CachingCpuAllocator& operator=(const CachingCpuAllocator&) = delete;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) override;
  AllocatorStats stats() const override;
  void reset_stats() override;
  void empty_cache() override;
  Device device() const override { return Device::cpu(); }

  /// The block size a request of `bytes` is rounded up to.
  static std::size_t block_size(std::size_t bytes);

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks_;
  AllocatorStats stats_;
};

/// The process-wide host allocator all CPU tensors use.
CachingCpuAllocator& cpu_allocator();

/// The allocator for `device`; throws an unsupported Error for CUDA devices in a build without CUDA.
Allocator& allocator_for(const Device& device);

}  // namespace troupe
