#include "troupe/transport/inprocess.hpp"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "troupe/kernels/error.hpp"

namespace troupe::transport {

namespace {

// Messages in flight to every rank, keyed by (sender, tag) and kept in send order.
struct World {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::map<std::pair<int, std::uint64_t>, std::deque<std::vector<char>>>> inbox;
  explicit World(int n) : inbox(static_cast<std::size_t>(n)) {}
};

class InProcessTransport : public Transport {
 public:
  InProcessTransport(std::shared_ptr<World> world, int rank, int size) : world_(std::move(world)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "in-process"; }

  // Sends are buffered (copied into the receiver's inbox) and complete at once; receives complete
  // in wait(), in the order they are waited for.
  Request post_send(int dst, std::uint64_t tag, const void* data, std::size_t bytes) override {
    check_peer(dst);
    const char* p = static_cast<const char*>(data);
    {
      std::lock_guard<std::mutex> lock(world_->mu);
      world_->inbox[static_cast<std::size_t>(dst)][{rank_, tag}].emplace_back(p, p + bytes);
    }
    world_->cv.notify_all();
    return Request{false, dst, tag, nullptr, bytes, nullptr};
  }

  Request post_recv(int src, std::uint64_t tag, void* data, std::size_t bytes) override {
    check_peer(src);
    return Request{true, src, tag, data, bytes, nullptr};
  }

  void wait(std::vector<Request>& requests) override {
    for (Request& r : requests)
      if (r.receive) receive(r);
  }

  void cancel(std::vector<Request>&) override {}  // receives copy only in wait(); nothing is pending

 private:
  void receive(const Request& r) {
    std::unique_lock<std::mutex> lock(world_->mu);
    auto& box = world_->inbox[static_cast<std::size_t>(rank_)];
    const auto key = std::make_pair(r.peer, r.tag);
    const bool arrived = world_->cv.wait_for(lock, timeout, [&] {
      auto it = box.find(key);
      return it != box.end() && !it->second.empty();
    });
    TROUPE_CHECK(arrived, runtime, "rank ", rank_, ": rank ", r.peer, " sent nothing within ", timeout.count(),
                 " ms (tag ", r.tag, "); it is stuck, or it is running a different collective");
    std::vector<char> msg = std::move(box[key].front());
    box[key].pop_front();
    TROUPE_CHECK(msg.size() == r.bytes, shape_mismatch, "rank ", rank_, ": rank ", r.peer, " sent ", msg.size(),
                 " bytes where ", r.bytes, " were expected; the ranks disagree on a tensor's size");
    std::memcpy(r.data, msg.data(), r.bytes);
  }

  void check_peer(int r) const {
    TROUPE_CHECK(r >= 0 && r < size_ && r != rank_, invalid_argument, "rank ", rank_, ": peer ", r,
                 " is not another rank of this ", size_, "-rank job");
  }
  std::shared_ptr<World> world_;
  int rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_inprocess_world(int size) {
  TROUPE_CHECK(size >= 1, invalid_argument, "make_inprocess_world: need at least 1 rank, got ", size);
  auto world = std::make_shared<World>(size);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<InProcessTransport>(world, r, size));
  return out;
}

}  // namespace troupe::transport
