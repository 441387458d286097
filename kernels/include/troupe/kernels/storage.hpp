#pragma once
// A block of device memory owned by one or more tensors (through shared_ptr).

#include <cstddef>
#include <cstdint>
#include <memory>

#include "troupe/kernels/allocator.hpp"

namespace troupe {

/// Owns `bytes` bytes from an allocator and gives them back when the last tensor lets go.
class Storage {
 public:
  /// Allocates `bytes` bytes on `device` from its allocator.
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
  /// A process-unique id, used to name tensor handles in traces.
  std::uint64_t id() const { return id_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::uint64_t id_ = 0;
};

}  // namespace troupe
