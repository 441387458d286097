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

/// Reads a hello from `fd` before `deadline` and checks it against `job`; `joined[r] >= 0` means
/// rank r is already connected (a second claim to it is refused).
Hello read_hello(int fd, const JobInfo& job, const std::vector<int>& joined, Deadline deadline);

/// Sends this rank's hello; false when the connection closed or the deadline passed.
bool write_hello(int fd, const JobInfo& job, Deadline deadline);

/// Sends a blob (u64 length, then the bytes).
bool send_blob(int fd, const std::string& blob, Deadline deadline);

/// Receives a blob; false on a closed connection, the deadline, or a length over `limit`.
bool recv_blob(int fd, std::string& blob, Deadline deadline, std::uint64_t limit = std::uint64_t(1) << 26);

}  // namespace troupe::transport
