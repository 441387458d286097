#pragma once
// The bytes of the rendezvous: a joining rank's hello to rank 0 (the magic "TRUP", its rank as an
// i32, the job token as a blob of at most 4096 bytes) and the length-prefixed blobs the ranks then
// exchange. Kept apart from Bootstrap so rank 0's check of what a stranger sends can be fuzzed on a
// socket pair.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "troupe/transport/bootstrap.hpp"

namespace troupe::transport {

using Deadline = std::chrono::steady_clock::time_point;

/// Milliseconds left until `deadline` (0 once it passed), for poll().
int remaining_ms(Deadline deadline);

/// What rank 0 made of a connection's hello.
struct Hello {
  enum class Verdict { accepted, not_troupe, wrong_token, bad_rank };
  Verdict verdict = Verdict::not_troupe;
  int rank = -1;  // the rank it claimed, when it got that far
};

/// Why a hello was refused, in words for rank 0's log ("wrong job token", ...).
const char* to_string(Hello::Verdict verdict);

/// One connection's hello read as its bytes arrive, so rank 0 reads many connections at once and a
/// stranger that sends nothing (or a byte a minute) delays nobody.
class HelloReader {
 public:
  enum class State { reading, complete, malformed };
  /// Takes bytes that arrived (at most wanted() of them); the state after them.
  State feed(const char* data, std::size_t n);
  /// How many more bytes the hello has at most: read no more, the rendezvous's blobs follow it.
  std::size_t wanted() const;
  /// The state so far.
  State state() const { return state_; }
  /// The verdict on a complete hello against `job` and the ranks `joined` so far (`joined[r] >= 0`:
  /// rank r is connected, so a second claim to it is refused); not_troupe unless complete.
  Hello verdict(const JobInfo& job, const std::vector<int>& joined) const;

 private:
  std::string bytes_;  // the magic, the rank, the token's length and the token, as they arrived
  State state_ = State::reading;
};

/// Reads a hello from `fd` before `deadline` and checks it against `job` (HelloReader::verdict).
Hello read_hello(int fd, const JobInfo& job, const std::vector<int>& joined, Deadline deadline);

/// Sends this rank's hello; false when the connection closed or the deadline passed.
bool write_hello(int fd, const JobInfo& job, Deadline deadline);

/// Sends a blob (u64 length, then the bytes).
bool send_blob(int fd, const std::string& blob, Deadline deadline);

/// Receives a blob; false on a closed connection, the deadline, or a length over `limit`.
bool recv_blob(int fd, std::string& blob, Deadline deadline, std::uint64_t limit = std::uint64_t(1) << 26);

}  // namespace troupe::transport
