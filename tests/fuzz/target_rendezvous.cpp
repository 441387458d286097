// What rank 0 reads from a connection at the rendezvous, on a Unix socket pair: the input is all a
// stranger sends (even first byte), or follows a correct hello of rank 1 and is then read as the
// rank's blob, as all_gather does (odd first byte). The writer closes its end, so every read ends.
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz/targets.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/handshake.hpp"

namespace troupe::fuzz {

namespace {

constexpr char kToken[] = "fuzz-job-token";

std::string hello_of_rank(std::int32_t rank) {
  std::string s("PURT", 4);  // the magic, little-endian
  s.append(reinterpret_cast<const char*>(&rank), 4);
  const std::uint64_t n = sizeof kToken - 1;
  s.append(reinterpret_cast<const char*>(&n), 8);
  return s + kToken;
}

}  // namespace

FuzzTarget rendezvous_target(const std::string&) {
  FuzzTarget t;
  t.name = "rendezvous";
  std::string blob(8, '\0');
  blob[0] = 5;
  t.seeds = {std::string(1, '\0') + hello_of_rank(1), std::string(1, '\0') + hello_of_rank(2),
             std::string(1, '\x01') + blob + "addr!"};
  t.dictionary = {"PURT", kToken, hello_of_rank(1)};
  t.run = [](const std::string& input) {
    if (input.empty()) return std::string("empty input");
    const bool with_token = input[0] & 1;
    const std::string bytes = (with_token ? hello_of_rank(1) : std::string()) + input.substr(1);
    int fds[2];
    TROUPE_CHECK(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, io, "socketpair failed");
    struct Close {
      int* fds;
      ~Close() {
        ::close(fds[0]);
        ::close(fds[1]);
      }
    } closer{fds};
    // Inputs are at most 64 KiB, which the socket buffers hold, so this write does not block.
    TROUPE_CHECK(::send(fds[1], bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()), io,
                 "socket pair write failed");
    ::shutdown(fds[1], SHUT_WR);
    transport::JobInfo job;
    job.rank = 0;
    job.size = 3;
    job.token = kToken;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    const transport::Hello hello = transport::read_hello(fds[0], job, {-1, -1, 7}, deadline);
    // A refusal is what rank 0 logs before it closes the connection.
    TROUPE_CHECK(hello.verdict == transport::Hello::Verdict::accepted, io, "rank 0 refused a connection (",
                 transport::to_string(hello.verdict), ")");
    std::string address;
    TROUPE_CHECK(transport::recv_blob(fds[0], address, deadline), io, "rank 0 dropped rank 1: its blob was cut short or too long");
    return std::string(address.empty() ? "empty blob read" : "blob read");
  };
  return t;
}

}  // namespace troupe::fuzz
