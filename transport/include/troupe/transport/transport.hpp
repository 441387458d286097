#pragma once
// Point-to-point transport between the ranks of one job: what every backend (in-process, UCX)
// provides and the collectives of process_group.hpp are built on. Calls block the calling thread
// (a communicator's own thread, never an actor's scheduler thread) and fail with a troupe::Error
// naming the peer when it dies, sends a message of the wrong size, or does not answer in time.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe::transport {

/// Byte transport of one rank to the others.
class Transport {
 public:
  virtual ~Transport() = default;
  /// This process's rank, 0 <= rank < size.
  virtual int rank() const = 0;
  /// Ranks in the job.
  virtual int size() const = 0;
  /// Sends `bytes` bytes to `dst` under `tag`; returns when `data` may be reused.
  virtual void send(int dst, std::uint64_t tag, const void* data, std::size_t bytes) = 0;
  /// Receives exactly `bytes` bytes sent by `src` under `tag`.
  virtual void recv(int src, std::uint64_t tag, void* data, std::size_t bytes) = 0;
  /// Sends to `dst` and receives from `src` at the same time (a ring step: no rank waits on a send
  /// whose receiver is itself waiting on a send).
  virtual void exchange(int dst, const void* send_data, std::size_t send_bytes, int src, void* recv_data,
                        std::size_t recv_bytes, std::uint64_t tag) = 0;
  /// How long one operation may wait for a peer before failing.
  std::chrono::milliseconds timeout{30000};
  /// "in-process", "ucx".
  virtual std::string backend() const = 0;
};

}  // namespace troupe::transport
