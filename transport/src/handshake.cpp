#include "troupe/transport/handshake.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace troupe::transport {

namespace {

constexpr std::uint32_t kMagic = 0x54525550;  // "TRUP"
constexpr std::uint64_t kTokenLimit = 4096;

// Reads or writes exactly n bytes before the deadline; false on a closed connection or timeout.
bool io_all(int fd, void* data, std::size_t n, bool write, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, remaining_ms(deadline)) <= 0) return false;
    const ssize_t k = write ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k <= 0) {
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace

int remaining_ms(Deadline deadline) {
  return static_cast<int>(std::max<long long>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count()));
}

const char* to_string(Hello::Verdict verdict) {
  switch (verdict) {
    case Hello::Verdict::accepted: return "accepted";
    case Hello::Verdict::not_troupe: return "not a Troupe rank";
    case Hello::Verdict::wrong_token: return "wrong job token";
    case Hello::Verdict::bad_rank: return "bad or duplicate rank";
  }
  return "unknown";
}

namespace {

constexpr std::size_t kHeader = sizeof(std::uint32_t) + sizeof(std::int32_t) + sizeof(std::uint64_t);

template <class T>
T read_at(const std::string& bytes, std::size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

}  // namespace

HelloReader::State HelloReader::feed(const char* data, std::size_t n) {
  if (state_ != State::reading) return state_;
  bytes_.append(data, std::min(n, wanted()));
  if (bytes_.size() >= sizeof kMagic && read_at<std::uint32_t>(bytes_, 0) != kMagic) return state_ = State::malformed;
  if (bytes_.size() >= kHeader && read_at<std::uint64_t>(bytes_, 8) > kTokenLimit) return state_ = State::malformed;
  if (wanted() == 0) state_ = State::complete;
  return state_;
}

std::size_t HelloReader::wanted() const {
  if (bytes_.size() < kHeader) return kHeader - bytes_.size();
  const std::uint64_t token = read_at<std::uint64_t>(bytes_, 8);
  return token > kTokenLimit ? 0 : static_cast<std::size_t>(kHeader + token - bytes_.size());
}

Hello HelloReader::verdict(const JobInfo& job, const std::vector<int>& joined) const {
  Hello hello;
  if (state_ != State::complete) return hello;
  const std::int32_t rank = read_at<std::int32_t>(bytes_, 4);
  hello.rank = rank;
  // The token before the rank, so a stranger learns nothing about the job from the verdict.
  if (bytes_.compare(kHeader, std::string::npos, job.token) != 0) {
    hello.verdict = Hello::Verdict::wrong_token;
  } else if (rank <= 0 || rank >= job.size || rank >= static_cast<std::int64_t>(joined.size()) ||
             joined[static_cast<std::size_t>(rank)] >= 0) {
    hello.verdict = Hello::Verdict::bad_rank;
  } else {
    hello.verdict = Hello::Verdict::accepted;
  }
  return hello;
}

Hello read_hello(int fd, const JobInfo& job, const std::vector<int>& joined, Deadline deadline) {
  HelloReader reader;
  char buf[512];
  while (reader.state() == HelloReader::State::reading) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, remaining_ms(deadline)) <= 0) break;
    const ssize_t k = ::recv(fd, buf, std::min(sizeof buf, reader.wanted()), 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) break;
    reader.feed(buf, static_cast<std::size_t>(k));
  }
  return reader.verdict(job, joined);
}

bool write_hello(int fd, const JobInfo& job, Deadline deadline) {
  const std::int32_t rank = job.rank;
  return io_all(fd, const_cast<std::uint32_t*>(&kMagic), sizeof kMagic, true, deadline) &&
         io_all(fd, const_cast<std::int32_t*>(&rank), sizeof rank, true, deadline) && send_blob(fd, job.token, deadline);
}

bool send_blob(int fd, const std::string& blob, Deadline deadline) {
  const std::uint64_t n = blob.size();
  return io_all(fd, const_cast<std::uint64_t*>(&n), sizeof n, true, deadline) &&
         io_all(fd, const_cast<char*>(blob.data()), blob.size(), true, deadline);
}

bool recv_blob(int fd, std::string& blob, Deadline deadline, std::uint64_t limit) {
  std::uint64_t n = 0;
  if (!io_all(fd, &n, sizeof n, false, deadline) || n > limit) return false;
  blob.resize(n);
  return io_all(fd, blob.data(), n, false, deadline);
}

}  // namespace troupe::transport
