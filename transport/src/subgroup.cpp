#include "troupe/transport/subgroup.hpp"

#include <algorithm>

#include "troupe/kernels/error.hpp"

namespace troupe::transport {

namespace {

class Subgroup : public Transport {
 public:
  Subgroup(std::unique_ptr<Transport> world, std::vector<int> members, int rank)
      : world_(std::move(world)), members_(std::move(members)), rank_(rank) {
    timeout = world_->timeout;
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string backend() const override { return world_->backend(); }
  Request post_send(int dst, std::uint64_t tag, const void* data, std::size_t bytes) override {
    sync_timeout();
    return world_->post_send(member(dst), tag, data, bytes);
  }
  Request post_recv(int src, std::uint64_t tag, void* data, std::size_t bytes) override {
    sync_timeout();
    return world_->post_recv(member(src), tag, data, bytes);
  }
  void wait(std::vector<Request>& requests) override {
    sync_timeout();
    world_->wait(requests);
  }
  void cancel(std::vector<Request>& requests) override { world_->cancel(requests); }

 private:
  int member(int r) const {
    TROUPE_CHECK(r >= 0 && r < size(), invalid_argument, "job rank ", members_[static_cast<std::size_t>(rank_)],
                 ": group rank ", r, " is outside a group of ", size());
    return members_[static_cast<std::size_t>(r)];
  }
  void sync_timeout() { world_->timeout = timeout; }  // the group's timeout is the one callers set
  std::unique_ptr<Transport> world_;
  std::vector<int> members_;
  int rank_;
};

}  // namespace

std::unique_ptr<Transport> make_subgroup(std::unique_ptr<Transport> world, std::vector<int> members) {
  TROUPE_CHECK(world != nullptr, invalid_argument, "make_subgroup: the world transport is null");
  const auto it = std::find(members.begin(), members.end(), world->rank());
  TROUPE_CHECK(it != members.end(), invalid_argument, "make_subgroup: job rank ", world->rank(),
               " is not among the group's members");
  for (int m : members)
    TROUPE_CHECK(m >= 0 && m < world->size() && std::count(members.begin(), members.end(), m) == 1, invalid_argument,
                 "make_subgroup: member ", m, " is not a distinct rank of a job of ", world->size());
  const int rank = static_cast<int>(it - members.begin());
  return std::make_unique<Subgroup>(std::move(world), std::move(members), rank);
}

}  // namespace troupe::transport
