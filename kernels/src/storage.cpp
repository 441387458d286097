#include "troupe/kernels/storage.hpp"

#include <atomic>

namespace troupe {

namespace {
std::atomic<std::uint64_t> next_storage_id{1};
}

Storage::Storage(std::size_t bytes, const Device& device)
    : bytes_(bytes), device_(device), allocator_(&allocator_for(device)), id_(next_storage_id++) {
  if (device.is_cpu()) lease_ = lease_host_memory(bytes);
  data_ = lease_.data ? lease_.data : allocator_->allocate(bytes);
}

Storage::~Storage() {
  if (!lease_.data) allocator_->deallocate(data_, bytes_);
  if (lease_.owner) lease_.owner->released(lease_.index);
}

}  // namespace troupe
