#pragma once
// Point-to-point transport between the ranks of one job: what every backend (in-process, UCX)
// provides and the collectives of process_group.hpp are built on. Calls block the calling thread
// (a communicator's own thread, never an actor's scheduler thread) and fail with a troupe::Error
// naming the peer when it dies, sends a message of the wrong size, or does not answer in time.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::transport {

/// A send or receive handed to a backend (post_send/post_recv) and not yet completed by wait().
struct Request {
  bool receive = false;     // receives check that exactly `bytes` arrived
  int peer = -1;            // the rank sent to or received from, for error messages
  std::uint64_t tag = 0;
  void* data = nullptr;     // the receive buffer
  std::size_t bytes = 0;
  void* handle = nullptr;   // the backend's own request; null once it completed
};

/// Byte transport of one rank to the others.
class Transport {
 public:
  virtual ~Transport() = default;
  /// This process's rank, 0 <= rank < size.
  virtual int rank() const = 0;
  /// Ranks in the job.
  virtual int size() const = 0;
  /// Starts sending `bytes` bytes to `dst` under `tag`; `data` must stay untouched until wait().
  virtual Request post_send(int dst, std::uint64_t tag, const void* data, std::size_t bytes) = 0;
  /// Starts receiving exactly `bytes` bytes sent by `src` under `tag` into `data`. Messages of
  /// one sender under one tag are matched in the order they were sent and posted.
  virtual Request post_recv(int src, std::uint64_t tag, void* data, std::size_t bytes) = 0;
  /// Completes the requests, in order; on the first failure cancels the others and throws.
  virtual void wait(std::vector<Request>& requests) = 0;
  /// Withdraws requests that will not be waited for (after a failure), so their buffers may go.
  virtual void cancel(std::vector<Request>& requests) = 0;
  /// Sends `bytes` bytes to `dst` under `tag`; returns when `data` may be reused.
  void send(int dst, std::uint64_t tag, const void* data, std::size_t bytes);
  /// Receives exactly `bytes` bytes sent by `src` under `tag`.
  void recv(int src, std::uint64_t tag, void* data, std::size_t bytes);
  /// Sends to `dst` and receives from `src` at the same time (a ring step: no rank waits on a send
  /// whose receiver is itself waiting on a send).
  void exchange(int dst, const void* send_data, std::size_t send_bytes, int src, void* recv_data, std::size_t recv_bytes,
                std::uint64_t tag);
  /// How long one operation may wait for a peer before failing.
  std::chrono::milliseconds timeout{30000};
  /// "in-process", "ucx".
  virtual std::string backend() const = 0;
};

}  // namespace troupe::transport
