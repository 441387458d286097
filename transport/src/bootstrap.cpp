#include "troupe/transport/bootstrap.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
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

// The master's socket address: an IPv4 address, or a host name resolved to one (Slurm's nodes).
sockaddr_in address_of(const JobInfo& job) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(job.master_port));
  if (::inet_pton(AF_INET, job.master_addr.c_str(), &a.sin_addr) == 1) return a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(job.master_addr.c_str(), nullptr, &hints, &found);
  TROUPE_CHECK(rc == 0 && found, invalid_argument, "master address '", job.master_addr,
               "' is neither an IPv4 address nor a host name this machine resolves (", ::gai_strerror(rc),
               "); set TROUPE_MASTER_ADDR or --master-addr");
  a.sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
  ::freeaddrinfo(found);
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

std::string first_slurm_host(const std::string& nodelist) {
  // The first item: up to the first comma outside brackets.
  std::size_t end = 0;
  for (int depth = 0; end < nodelist.size() && !(nodelist[end] == ',' && depth == 0); ++end)
    depth += nodelist[end] == '[' ? 1 : nodelist[end] == ']' ? -1 : 0;
  const std::string item = nodelist.substr(0, end);
  const std::size_t open = item.find('['), close = item.find(']');
  if (open == std::string::npos) return item;
  TROUPE_CHECK(close != std::string::npos && close > open + 1, invalid_argument, "SLURM_JOB_NODELIST='", nodelist,
               "' has an unclosed or empty bracket; set TROUPE_MASTER_ADDR");
  const std::string ranges = item.substr(open + 1, close - open - 1);
  const std::string first = ranges.substr(0, std::min(ranges.find(','), ranges.find('-')));
  return item.substr(0, open) + first + item.substr(close + 1);
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
  } else if (std::getenv("PMI_RANK")) {  // MPICH's and Intel MPI's launcher (Hydra)
    j.rank = env_int("PMI_RANK", 0);
    j.size = env_int("PMI_SIZE", 1);
    j.local_size = env_int("MPI_LOCALNRANKS", 1);
    j.source = "pmi";
  } else if (std::getenv("SLURM_PROCID")) {
    j.rank = env_int("SLURM_PROCID", 0);
    j.size = env_int("SLURM_NTASKS", 1);
    j.local_size = env_int("SLURM_NTASKS_PER_NODE", 1);
    j.source = "slurm";
  } else if (std::getenv("PMIX_RANK")) {  // a PMIx launcher without mpirun's or Slurm's variables
    j.rank = env_int("PMIX_RANK", 0);
    TROUPE_CHECK(std::getenv("TROUPE_WORLD_SIZE"), invalid_argument, "PMIX_RANK=", std::getenv("PMIX_RANK"),
                 " is set, but PMIx puts no world size in the environment; set TROUPE_WORLD_SIZE too");
    j.size = env_int("TROUPE_WORLD_SIZE", 1);
    j.local_size = env_int("TROUPE_LOCAL_WORLD_SIZE", 1);
    j.source = "pmix";
  } else {
    j.source = "single process";
  }
  // Under Slurm the master is the node the job was launched from, or the job's first node.
  if (const char* launch = std::getenv("SLURM_LAUNCH_NODE_IPADDR"); launch && *launch) j.master_addr = launch;
  else if (const char* nodes = std::getenv("SLURM_JOB_NODELIST"); nodes && *nodes) j.master_addr = first_slurm_host(nodes);
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
    accept_ranks(deadline);
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

namespace {

// A connection rank 0 accepted whose hello has not all arrived.
struct Arriving {
  int fd = -1;
  std::string who;  // "address:port", for the log
  HelloReader hello;
  Clock::time_point expires;
};

// How long a connection may take to send its hello, and how many may be sending one at once: past
// that the oldest is dropped, so strangers can neither delay the job nor exhaust rank 0's sockets.
constexpr std::chrono::seconds kHelloTime{5};
constexpr std::size_t kMaxArriving = 64;

void refuse(Arriving& a, const char* why) {
  std::fprintf(stderr, "troupe: rank 0 refused a connection from %s (%s)\n", a.who.c_str(), why);
  ::close(a.fd);
  a.fd = -1;
}

}  // namespace

// Rank 0: accepts connections and reads their hellos side by side, as their bytes arrive, until
// every rank joined; a connection that sends something else, or nothing within kHelloTime, is
// refused and logged without holding up the others.
void Bootstrap::accept_ranks(Clock::time_point deadline) {
  std::vector<Arriving> arriving;
  int arrived = 1;
  const auto missing = [&] {
    std::string m;
    for (int r = 1; r < job_.size; ++r)
      if (peers_[static_cast<std::size_t>(r)] < 0) m += (m.empty() ? "" : ", ") + std::to_string(r);
    return m;
  };
  while (arrived < job_.size) {
    const auto now = Clock::now();
    if (now >= deadline) {
      for (Arriving& a : arriving) ::close(a.fd);
      fail(ErrorKind::runtime, "rank 0 waited ", timeout_.count(), " ms for rank(s) ", missing(),
           " to join the job; they never arrived (crashed at start, or launched with another master address/port)");
    }
    auto wake = deadline;
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const Arriving& a : arriving) {
      fds.push_back({a.fd, POLLIN, 0});
      wake = std::min(wake, a.expires);
    }
    if (::poll(fds.data(), fds.size(), remaining_ms(wake)) < 0 && errno != EINTR)
      fail(ErrorKind::io, "rank 0 cannot wait for the ranks to join: ", std::strerror(errno));
    for (std::size_t i = 0; i < arriving.size(); ++i) {
      Arriving& a = arriving[i];
      if (fds[i + 1].revents != 0) {
        char buf[512];
        const ssize_t k = ::recv(a.fd, buf, std::min(sizeof buf, a.hello.wanted()), MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) {
          refuse(a, "closed before its hello");
          continue;
        }
        if (a.hello.feed(buf, static_cast<std::size_t>(k)) == HelloReader::State::reading) continue;
        const Hello hello = a.hello.verdict(job_, peers_);
        if (hello.verdict != Hello::Verdict::accepted) {
          refuse(a, to_string(hello.verdict));
          continue;
        }
        const int one = 1;
        ::setsockopt(a.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        peers_[static_cast<std::size_t>(hello.rank)] = a.fd;
        a.fd = -1;
        ++arrived;
      } else if (Clock::now() >= a.expires) {
        refuse(a, "no hello within 5 s");
      }
    }
    std::erase_if(arriving, [](const Arriving& a) { return a.fd < 0; });
    if (fds[0].revents & POLLIN) {
      sockaddr_in from{};
      socklen_t len = sizeof from;
      const int fd = ::accept(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len);
      if (fd < 0) continue;
      char ip[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &from.sin_addr, ip, sizeof ip);
      if (arriving.size() >= kMaxArriving) {
        refuse(arriving.front(), "too many connections sending their hello at once");
        arriving.erase(arriving.begin());
      }
      arriving.push_back({fd, std::string(ip) + ":" + std::to_string(ntohs(from.sin_port)), {}, Clock::now() + kHelloTime});
    }
  }
  for (Arriving& a : arriving) refuse(a, "the job is complete");
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
