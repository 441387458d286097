#include "troupe/transport/ucx.hpp"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "troupe/kernels/error.hpp"

namespace troupe::transport {

namespace {

using Clock = std::chrono::steady_clock;

void check(ucs_status_t s, const char* what) {
  TROUPE_CHECK(s == UCS_OK, io, "UCX ", what, " failed: ", ucs_status_string(s));
}

// UCX tags: sender rank in the top 16 bits, so a receive matches one peer exactly.
std::uint64_t wire_tag(int src, std::uint64_t tag) { return (static_cast<std::uint64_t>(src) << 48) | (tag & 0xFFFFFFFFFFFFULL); }

class UcxTransport : public Transport {
 public:
  UcxTransport(Bootstrap& boot, std::chrono::milliseconds t) : rank_(boot.rank()), size_(boot.size()) {
    timeout = t;
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "config");
    const ucs_status_t s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    check(s, "init");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // one communicator thread drives each transport
    check(ucp_worker_create(context_, &wp, &worker_), "worker");
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    check(ucp_worker_get_address(worker_, &address, &length), "worker address");
    const std::string mine(reinterpret_cast<const char*>(address), length);
    ucp_worker_release_address(worker_, address);
    const std::vector<std::string> all = boot.all_gather(mine);
    failed_.assign(static_cast<std::size_t>(size_), UCS_OK);
    eps_.assign(static_cast<std::size_t>(size_), nullptr);
    handlers_.resize(static_cast<std::size_t>(size_));
    // UCX's shared-memory transports cannot report a failed peer, so asking for peer-failure
    // handling would push every message onto TCP (about 2x slower here). By default a dead peer is
    // therefore caught by the timeout; TROUPE_UCX_PEER_FAILURE=1 trades speed for instant detection.
    const char* peer_mode = std::getenv("TROUPE_UCX_PEER_FAILURE");
    const bool detect_peers = peer_mode && std::string(peer_mode) == "1";
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      handlers_[static_cast<std::size_t>(r)] = {this, r};
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(all[static_cast<std::size_t>(r)].data());
      ep.err_mode = detect_peers ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
      ep.err_handler.cb = &UcxTransport::on_error;
      ep.err_handler.arg = &handlers_[static_cast<std::size_t>(r)];
      // A peer that died after the rendezvous fails here (shared memory gone): name it.
      const ucs_status_t made = ucp_ep_create(worker_, &ep, &eps_[static_cast<std::size_t>(r)]);
      TROUPE_CHECK(made == UCS_OK, io, "rank ", rank_, ": UCX endpoint to rank ", r, " failed: ", ucs_status_string(made),
                   " (rank ", r, " may have stopped); restart the job");
    }
  }

  // Closes every endpoint without waiting for peers (they may be gone), within one fixed bound.
  // A request that could not be withdrawn may still point into a caller's buffer, and destroying
  // the worker under it is undefined; such a worker (and one whose endpoints would not close) is
  // left to the process's exit instead.
  ~UcxTransport() override {
    if (abandoned_) return;
    for (int r = 0; r < size_; ++r) close_endpoint(r);
    if (!progress_until_complete(closing_, Clock::now() + kCloseBound)) return;
    free_completed(closing_);
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "ucx"; }

  Request post_send(int dst, std::uint64_t tag, const void* data, std::size_t bytes) override {
    check_peer(dst);
    ucp_request_param_t p{};
    void* req = ucp_tag_send_nbx(eps_[static_cast<std::size_t>(dst)], data, bytes, wire_tag(rank_, tag), &p);
    TROUPE_CHECK(!UCS_PTR_IS_ERR(req), runtime, "rank ", rank_, ": sending to rank ", dst,
                 " failed: ", ucs_status_string(UCS_PTR_STATUS(req)));
    return Request{false, dst, tag, nullptr, bytes, req};
  }

  Request post_recv(int src, std::uint64_t tag, void* data, std::size_t bytes) override {
    check_peer(src);
    ucp_request_param_t p{};
    void* req = ucp_tag_recv_nbx(worker_, data, bytes, wire_tag(src, tag), ~0ULL, &p);
    TROUPE_CHECK(!UCS_PTR_IS_ERR(req), runtime, "rank ", rank_, ": receiving from rank ", src,
                 " failed: ", ucs_status_string(UCS_PTR_STATUS(req)));
    return Request{true, src, tag, data, bytes, req};
  }

  // Receives cancel at once, but a send already handed to a dead or stopped peer never completes
  // (nothing acknowledges it), so after kCancelBound the endpoints of the peers still holding
  // requests are force-closed, which completes every request on them. Whatever still survives
  // that is abandoned: the transport then refuses all further work and is never torn down.
  void cancel(std::vector<Request>& requests) override {
    std::vector<void*> open;
    for (Request& r : requests)
      if (r.handle) {
        ucp_request_cancel(worker_, r.handle);
        open.push_back(r.handle);
      }
    if (!progress_until_complete(open, Clock::now() + kCancelBound)) {
      for (const Request& r : requests)
        if (r.handle && ucp_request_check_status(r.handle) == UCS_INPROGRESS) close_endpoint(r.peer);
      progress_until_complete(open, Clock::now() + kCloseBound);
    }
    if (!free_completed(open)) abandoned_ = true;
    for (Request& r : requests) r.handle = nullptr;
  }

  // Progresses until every request completed, checking each receive's length. A dead peer or
  // the timeout cancels every request still open, then fails naming the peer.
  void wait(std::vector<Request>& requests) override {
    const auto deadline = Clock::now() + timeout;
    for (std::size_t k = 0; k < requests.size(); ++k) {
      Request& r = requests[k];
      if (r.handle == nullptr) continue;  // completed when posted
      const char* what = r.receive ? "receiving from" : "sending to";
      ucs_status_t st;
      unsigned idle = 0;
      while ((st = ucp_request_check_status(r.handle)) == UCS_INPROGRESS) {
        idle = ucp_worker_progress(worker_) ? 0 : idle + 1;
        if (idle > kIdleSpinsBeforeYield) {
          std::this_thread::yield();
          idle = 0;
        }
        const bool dead = failed_[static_cast<std::size_t>(r.peer)] != UCS_OK;
        if (!dead && Clock::now() <= deadline) continue;
        close_endpoint(r.peer);  // the job is failing: later collectives with this peer fail at once
        cancel(requests);
        if (dead)
          fail(ErrorKind::runtime, "rank ", rank_, ": rank ", r.peer, " died or closed its connection (UCX: ",
               ucs_status_string(failed_[static_cast<std::size_t>(r.peer)]), ")");
        fail(ErrorKind::runtime, "rank ", rank_, ": ", what, " rank ", r.peer, " did not complete within ", timeout.count(),
             " ms; that rank is stuck, dead, or running a different collective");
      }
      std::size_t got = r.bytes;
      if (r.receive && st == UCS_OK) {
        ucp_tag_recv_info_t info{};
        if (ucp_tag_recv_request_test(r.handle, &info) == UCS_OK) got = info.length;
      }
      ucp_request_free(r.handle);
      r.handle = nullptr;
      if (st != UCS_OK) {
        cancel(requests);
        fail(st == UCS_ERR_MESSAGE_TRUNCATED ? ErrorKind::shape_mismatch : ErrorKind::runtime, "rank ", rank_, ": ", what,
             " rank ", r.peer, " failed: ", ucs_status_string(st),
             st == UCS_ERR_MESSAGE_TRUNCATED ? "; the ranks disagree on a message size" : "");
      }
      if (got != r.bytes) {
        cancel(requests);
        fail(ErrorKind::shape_mismatch, "rank ", rank_, ": rank ", r.peer, " sent ", got, " bytes where ", r.bytes,
             " were expected; the ranks disagree on a tensor's size");
      }
    }
  }

 private:
  struct Handler {
    UcxTransport* self;
    int rank;
  };
  static void on_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* h = static_cast<Handler*>(arg);
    h->self->failed_[static_cast<std::size_t>(h->rank)] = status;
  }

  void check_peer(int r) const {
    TROUPE_CHECK(!abandoned_, runtime, "rank ", rank_, ": this UCX transport failed earlier and was shut down; "
                 "restart the job");
    TROUPE_CHECK(r >= 0 && r < size_ && r != rank_, invalid_argument, "rank ", rank_, ": peer ", r,
                 " is not another rank of this ", size_, "-rank job");
    const ucs_status_t st = failed_[static_cast<std::size_t>(r)];
    TROUPE_CHECK(st == UCS_OK, runtime, "rank ", rank_, ": rank ", r,
                 st == UCS_ERR_ENDPOINT_TIMEOUT ? " stopped answering earlier and its connection was closed"
                                                : " died or closed its connection",
                 " (UCX: ", ucs_status_string(st), "); restart the job");
  }

  // Progresses the worker until no handle in `handles` is in progress or the deadline passes;
  // true when all completed.
  bool progress_until_complete(const std::vector<void*>& handles, Clock::time_point deadline) {
    for (;;) {
      const bool done = std::all_of(handles.begin(), handles.end(),
                                    [](void* h) { return h == nullptr || ucp_request_check_status(h) != UCS_INPROGRESS; });
      if (done) return true;
      if (Clock::now() > deadline) return false;
      if (!ucp_worker_progress(worker_)) std::this_thread::yield();
    }
  }

  // Frees the completed handles and forgets them; true when none was left in progress.
  static bool free_completed(std::vector<void*>& handles) {
    bool all = true;
    for (void*& h : handles) {
      if (h == nullptr) continue;
      if (ucp_request_check_status(h) == UCS_INPROGRESS) {
        all = false;
        continue;
      }
      ucp_request_free(h);
      h = nullptr;
    }
    return all;
  }

  // Force-closes the endpoint to `peer` (completing its requests with UCS_ERR_CANCELED) and marks
  // the peer failed, so later operations with it fail at once instead of timing out again.
  void close_endpoint(int peer) {
    ucp_ep_h& ep = eps_[static_cast<std::size_t>(peer)];
    if (!ep) return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep, &p);
    ep = nullptr;
    if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
    if (failed_[static_cast<std::size_t>(peer)] == UCS_OK) failed_[static_cast<std::size_t>(peer)] = UCS_ERR_ENDPOINT_TIMEOUT;
  }

  // How long cancelling waits for requests to withdraw before force-closing endpoints, and how
  // long force-closing may take; together they bound how long a failing wait outlasts its
  // timeout. Receives withdraw at once; a rendezvous send to a dead peer withdraws never (with
  // UCP_ERR_HANDLING_MODE_NONE not even on a forced close), so longer bounds would buy nothing.
  static constexpr auto kCancelBound = std::chrono::milliseconds(200);
  static constexpr auto kCloseBound = std::chrono::milliseconds(300);

  // A wait spins (shared-memory messages arrive within microseconds), but once the worker has
  // been idle this many progress calls (~10 us) it yields between polls, so on a slow link the
  // communicator thread hands its core to compute threads that are runnable instead of burning it
  // through backward. Yielding costs nothing when no other thread wants the core. Measured on two
  // ranks over a 1 Gbit/s link sharing 2 cores (docs/PERFORMANCE.md): DP step 488 -> 408 ms with
  // the line rate kept; sleeping on UCX's event fd instead halved the TCP throughput.
  static constexpr unsigned kIdleSpinsBeforeYield = 200;

  int rank_, size_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<ucs_status_t> failed_;
  std::vector<Handler> handlers_;
  std::vector<void*> closing_;  // endpoint-close requests not yet completed
  bool abandoned_ = false;      // a request outlived cancel(): its buffer may still be in use
};

}  // namespace

std::unique_ptr<Transport> make_ucx_transport(Bootstrap& bootstrap, std::chrono::milliseconds timeout) {
  return std::make_unique<UcxTransport>(bootstrap, timeout);
}

}  // namespace troupe::transport
