#include "troupe/transport/bootstrap.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "troupe/kernels/error.hpp"
#include "troupe/transport/handshake.hpp"

namespace troupe::transport {

namespace {

using Clock = std::chrono::steady_clock;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TROUPE_CHECK(end && *end == '\0', invalid_argument, name, "='", v, "' is not an integer");
  return static_cast<int>(x);
}

// A positive duration in seconds, fractions allowed (TROUPE_TIMEOUT=0.5).
std::chrono::milliseconds env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  double x = fallback;
  if (v && *v) {
    char* end = nullptr;
    x = std::strtod(v, &end);
    TROUPE_CHECK(end && *end == '\0' && x > 0 && x <= 86400, invalid_argument, name, "='", v,
                 "' is not a number of seconds between 0 and 86400 (e.g. 30 or 0.5)");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(x * 1000 + 0.5));
}

std::string env_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

sockaddr_in address_of(const JobInfo& job) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(job.master_port));
  TROUPE_CHECK(::inet_pton(AF_INET, job.master_addr.c_str(), &a.sin_addr) == 1, invalid_argument,
               "master address '", job.master_addr, "' is not an IPv4 address (TROUPE_MASTER_ADDR / --master-addr)");
  return a;
}

}  // namespace

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  TROUPE_CHECK(ok, io, "cannot find a free TCP port on 127.0.0.1: ", std::strerror(errno), "; pass one with --port");
  return ntohs(a.sin_port);
}

JobInfo JobInfo::from_environment() {
  JobInfo j;
  if (std::getenv("TROUPE_RANK")) {
    j.rank = env_int("TROUPE_RANK", 0);
    j.size = env_int("TROUPE_WORLD_SIZE", 1);
    j.local_size = env_int("TROUPE_LOCAL_WORLD_SIZE", 1);
    j.source = "troupe-launch";
  } else if (std::getenv("OMPI_COMM_WORLD_RANK")) {
    j.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    j.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    j.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    j.source = "mpirun";
  } else if (std::getenv("SLURM_PROCID")) {
    j.rank = env_int("SLURM_PROCID", 0);
    j.size = env_int("SLURM_NTASKS", 1);
    j.local_size = env_int("SLURM_NTASKS_PER_NODE", 1);
    j.source = "slurm";
  } else {
    j.source = "single process";
  }
  j.master_addr = env_str("TROUPE_MASTER_ADDR", j.master_addr);
  j.master_port = env_int("TROUPE_MASTER_PORT", j.master_port);
  j.token = env_str("TROUPE_JOB_TOKEN", "");
  j.timeout = env_seconds("TROUPE_TIMEOUT", 30);
  TROUPE_CHECK(j.size >= 1 && j.rank >= 0 && j.rank < j.size, invalid_argument, "rank ", j.rank,
               " does not fit a world of ", j.size, " (from ", j.source, ")");
  TROUPE_CHECK(j.local_size >= 1 && j.local_size <= j.size, invalid_argument, "a local size of ", j.local_size,
               " ranks does not fit a world of ", j.size, " (from ", j.source, ")");
  TROUPE_CHECK(j.master_port >= 1 && j.master_port <= 65535, invalid_argument, "TROUPE_MASTER_PORT=", j.master_port,
               " is not a TCP port; use 1-65535");
  return j;
}

Bootstrap::Bootstrap(const JobInfo& job, std::chrono::milliseconds timeout) : job_(job), timeout_(timeout) {
  if (job.size == 1) return;
  const auto deadline = Clock::now() + timeout;
  const sockaddr_in addr = address_of(job);
  if (job.rank == 0) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    TROUPE_CHECK(::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 && ::listen(listen_fd_, 64) == 0,
                 io, "rank 0 cannot listen on ", job.master_addr, ":", job.master_port, ": ", std::strerror(errno),
                 "; pick another TROUPE_MASTER_PORT");
    peers_.assign(static_cast<std::size_t>(job.size), -1);
    int arrived = 1;
    while (arrived < job.size) {
      pollfd pfd{listen_fd_, POLLIN, 0};
      if (::poll(&pfd, 1, remaining_ms(deadline)) <= 0) {
        std::string missing;
        for (int r = 1; r < job.size; ++r)
          if (peers_[static_cast<std::size_t>(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        fail(ErrorKind::runtime, "rank 0 waited ", timeout.count(), " ms for rank(s) ", missing,
             " to join the job; they never arrived (crashed at start, or launched with another master address/port)");
      }
      sockaddr_in from{};
      socklen_t len = sizeof from;
      const int fd = ::accept(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len);
      if (fd < 0) continue;
      char who[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &from.sin_addr, who, sizeof who);
      const Hello hello = read_hello(fd, job, peers_, std::min(deadline, Clock::now() + std::chrono::seconds(5)));
      if (hello.verdict != Hello::Verdict::accepted) {
        std::fprintf(stderr, "troupe: rank 0 refused a connection from %s:%d (%s)\n", who, ntohs(from.sin_port),
                     to_string(hello.verdict));
        ::close(fd);
        continue;
      }
      const int one_nodelay = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one_nodelay, sizeof one_nodelay);
      peers_[static_cast<std::size_t>(hello.rank)] = fd;
      ++arrived;
    }
    return;
  }
  // Other ranks: rank 0 may not listen yet, so retry until the deadline.
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      TROUPE_CHECK(write_hello(fd, job, deadline),
                   io, "rank ", job.rank, " lost the connection to rank 0 at ", job.master_addr, ":", job.master_port,
                   " while joining");
      peers_.push_back(fd);
      return;
    }
    ::close(fd);
    TROUPE_CHECK(Clock::now() < deadline, runtime, "rank ", job.rank, " could not reach rank 0 at ", job.master_addr,
                 ":", job.master_port, " within ", timeout.count(), " ms; is rank 0 running?");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Bootstrap::~Bootstrap() {
  for (int fd : peers_)
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::vector<std::string> Bootstrap::all_gather(const std::string& mine) {
  std::vector<std::string> all(static_cast<std::size_t>(job_.size));
  all[static_cast<std::size_t>(job_.rank)] = mine;
  if (job_.size == 1) return all;
  const auto deadline = Clock::now() + timeout_;
  if (job_.rank == 0) {
    for (int r = 1; r < job_.size; ++r)
      TROUPE_CHECK(recv_blob(peers_[static_cast<std::size_t>(r)], all[static_cast<std::size_t>(r)], deadline), runtime,
                   "rank 0: rank ", r, " closed its connection or did not answer within ", timeout_.count(),
                   " ms during the rendezvous; it probably died");
    for (int r = 1; r < job_.size; ++r)
      for (const std::string& blob : all)
        TROUPE_CHECK(send_blob(peers_[static_cast<std::size_t>(r)], blob, deadline), runtime, "rank 0: rank ", r,
                     " closed its connection during the rendezvous; it probably died");
    return all;
  }
  TROUPE_CHECK(send_blob(peers_[0], mine, deadline), runtime, "rank ", job_.rank,
               ": rank 0 closed the rendezvous connection; it probably died");
  for (auto& blob : all)
    TROUPE_CHECK(recv_blob(peers_[0], blob, deadline), runtime, "rank ", job_.rank, ": rank 0 did not answer within ",
                 timeout_.count(), " ms during the rendezvous (it died, or another rank never arrived)");
  return all;
}

}  // namespace troupe::transport
