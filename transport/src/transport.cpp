#include "troupe/transport/transport.hpp"

namespace troupe::transport {

void Transport::send(int dst, std::uint64_t tag, const void* data, std::size_t bytes) {
  std::vector<Request> r{post_send(dst, tag, data, bytes)};
  wait(r);
}

void Transport::recv(int src, std::uint64_t tag, void* data, std::size_t bytes) {
  std::vector<Request> r{post_recv(src, tag, data, bytes)};
  wait(r);
}

void Transport::exchange(int dst, const void* send_data, std::size_t send_bytes, int src, void* recv_data,
                         std::size_t recv_bytes, std::uint64_t tag) {
  std::vector<Request> r{post_recv(src, tag, recv_data, recv_bytes)};
  try {
    r.push_back(post_send(dst, tag, send_data, send_bytes));
  } catch (...) {
    cancel(r);  // the receive must not stay posted into a buffer the caller may free
    throw;
  }
  wait(r);
}

}  // namespace troupe::transport
