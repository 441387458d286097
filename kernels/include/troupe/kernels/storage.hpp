#pragma once
// A block of device memory owned by one or more tensors (through shared_ptr).

#include <cstddef>
#include <cstdint>
#include <memory>

#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/planned_memory.hpp"

namespace troupe {

/// Owns `bytes` bytes from an allocator (or from a planned arena, on a host thread running a planned
/// step) and gives them back when the last tensor lets go.
class Storage {
 public:
  /// Allocates `bytes` bytes on `device` from its allocator, or takes them from the thread's
  /// planned arena (planned_memory.hpp).
  Storage(std::size_t bytes, const Device& device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  /// Start of the block.
  void* data() const { return data_; }
  /// Size of the block as requested.
  std::size_t bytes() const { return bytes_; }
  /// Where the block lives.
  const Device& device() const { return device_; }
  /// Where a planned block came from (empty when the allocator gave it): which arena or
  /// recorder, and its index there.
  const MemoryLease& lease() const { return lease_; }
  /// A process-unique id, used to name tensor handles in traces.
  std::uint64_t id() const { return id_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  MemoryLease lease_;  // the planned place, or the recorder to tell, when a host scope saw this block
  std::uint64_t id_ = 0;
};

}  // namespace troupe
