#include "troupe/kernels/storage.hpp"

#include <atomic>

namespace troupe {

namespace {
std::atomic<std::uint64_t> next_storage_id{1};
}

Storage::Storage(std::size_t bytes, const Device& device)
    : bytes_(bytes), device_(device), allocator_(&allocator_for(device)), id_(next_storage_id++) {
  data_ = allocator_->allocate(bytes);
}

Storage::~Storage() { allocator_->deallocate(data_, bytes_); }

}  // namespace troupe
