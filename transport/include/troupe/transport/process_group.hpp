#pragma once
// Collectives over the ranks of a Transport. ProcessGroup runs them on the calling thread; a
// Communicator runs them in order on its own thread and reports each completion through a
// callback, so an actor can start a collective and go on (its callback sends the actor a message).
// All ranks must issue the same collectives in the same order; a disagreement (sizes, dtypes, kind)
// is detected up front and fails the collective on every rank with the same message.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "troupe/kernels/tensor.hpp"
#include "troupe/transport/transport.hpp"

namespace troupe::transport {

/// How all_reduce and reduce_scatter combine the ranks' values.
enum class ReduceOp { sum, mean };

/// Synchronous collectives; rings chunked into `chunk_bytes` messages.
class ProcessGroup {
 public:
  /// Collectives of this group use tag space `channel`, so groups on one transport never mix.
  explicit ProcessGroup(Transport& transport, std::uint32_t channel = 0, std::size_t chunk_bytes = 1 << 20);
  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  /// Bytes this rank has sent in the ring collectives' data so far (what gradient compression saves).
  std::uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  /// Reduces a dense f32/f64 tensor over the ranks in place (ring: reduce-scatter, then all-gather);
  /// a bf16 one too, summed only (compressed gradients: each hop adds in f32 and rounds once).
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum);
  /// Every rank's tensor, concatenated along dim 0 in rank order.
  Tensor all_gather(const Tensor& tensor);
  /// The reduction of every rank's `tensor` ([size * k, ...]), of which this rank keeps part `rank` ([k, ...]).
  Tensor reduce_scatter(const Tensor& tensor, ReduceOp op = ReduceOp::sum);
  /// Copies root's tensor into every rank's `tensor` (same shape and dtype everywhere).
  void broadcast(const Tensor& tensor, int root);
  /// Point to point: `tensor` to rank `dst`, and into `tensor` from rank `src`.
  void send(const Tensor& tensor, int dst);
  void recv(const Tensor& tensor, int src);
  /// Returns once every rank reached it.
  void barrier();

 private:
  struct Header;
  void agree(const char* op, const Tensor& tensor, std::int64_t extra);
  std::uint64_t next_tag();
  void ring_reduce_scatter(char* data, const std::vector<std::int64_t>& offsets, std::size_t elem, DType dtype);
  void ring_all_gather(char* data, const std::vector<std::int64_t>& offsets, std::size_t elem);
  void exchange_chunked(int dst, const char* send, int src, char* recv_into, std::size_t send_bytes,
                        std::size_t recv_bytes, const std::function<void(const char*, std::size_t, std::size_t)>& on_chunk);
  Transport& t_;
  std::uint32_t channel_;
  std::size_t chunk_bytes_;
  std::uint32_t sequence_ = 0;
  std::vector<char> scratch_;  // two chunks, alternating, reused: receives that are reduced rather than stored
  std::atomic<std::uint64_t> bytes_sent_{0};  // written by the group's thread, read by anyone
};

/// Called when a queued collective finished: null, or the exception that failed it.
using Done = std::function<void(std::exception_ptr error)>;

/// A ProcessGroup on its own thread with a queue of collectives, run in submission order. It may be
/// released from its own thread (its last holder a completion callback; the work functions must not
/// hold it): the thread then ends after that callback, and the collectives still queued are dropped
/// with their callbacks.
class Communicator {
 public:
  /// Owns `transport`; `name` appears in errors and traces ("allreduce", "allgather").
  Communicator(std::unique_ptr<Transport> transport, std::string name, std::uint32_t channel = 0,
               std::size_t chunk_bytes = 1 << 20);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  /// Queues an in-place all_reduce of `tensor`; `done` runs on the communicator's thread.
  void all_reduce(Tensor tensor, ReduceOp op, Done done);
  /// Queues any sequence of collectives on the group.
  void submit(std::function<void(ProcessGroup&)> work, Done done);
  /// The same, returning a future.
  std::future<void> submit(std::function<void(ProcessGroup&)> work);
  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  const std::string& name() const { return name_; }
  /// Seconds spent running collectives so far (for communication time per step).
  double busy_seconds() const { return static_cast<double>(busy_ns_.load()) * 1e-9; }
  /// Bytes sent by its collectives so far (ProcessGroup::bytes_sent), readable from any thread.
  std::uint64_t bytes_sent() const { return group_.bytes_sent(); }

 private:
  void loop();
  std::unique_ptr<Transport> transport_;
  std::string name_;
  ProcessGroup group_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void(ProcessGroup&)>, Done>> queue_;
  bool stopping_ = false;
  std::atomic<std::int64_t> busy_ns_{0};
  // Set when the communicator is destroyed on its own thread: the loop, which holds the flag too,
  // returns without touching the communicator again.
  std::shared_ptr<std::atomic<bool>> released_ = std::make_shared<std::atomic<bool>>(false);
  std::thread thread_;
};

}  // namespace troupe::transport
