#include "troupe/transport/process_group.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "troupe/kernels/error.hpp"
#include "troupe/kernels/layout.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::transport {

namespace {

void check_dense_float(const char* op, const Tensor& t) {
  TROUPE_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(), invalid_argument, op,
               ": needs a dense CPU tensor, got ", t.defined() ? t.str() : std::string("an undefined tensor"));
  TROUPE_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, dtype_mismatch, op, ": reduces f32 or f64, got ", t.str());
}

// Element offsets of `parts` near-equal segments of n elements (the first n % parts one longer).
std::vector<std::int64_t> segment_offsets(std::int64_t n, int parts) {
  std::vector<std::int64_t> off(static_cast<std::size_t>(parts) + 1, 0);
  for (int p = 0; p < parts; ++p) off[p + 1] = off[p] + n / parts + (p < n % parts ? 1 : 0);
  return off;
}

template <class T>
void add_into(char* dst, const char* src, std::size_t bytes) {
  T* d = reinterpret_cast<T*>(dst);
  const T* s = reinterpret_cast<const T*>(src);
  for (std::size_t i = 0, n = bytes / sizeof(T); i < n; ++i) d[i] += s[i];
}

// bf16 sums (compressed gradients): each pair added in f32 and rounded once.
void add_into_bf16(char* dst, const char* src, std::size_t bytes) {
  auto* d = reinterpret_cast<BFloat16*>(dst);
  const auto* s = reinterpret_cast<const BFloat16*>(src);
  for (std::size_t i = 0, n = bytes / sizeof(BFloat16); i < n; ++i) d[i] = float_to_bf16(bf16_to_float(d[i]) + bf16_to_float(s[i]));
}

}  // namespace

// What every rank states about a collective before any data moves.
struct ProcessGroup::Header {
  char op[24] = {};
  std::int32_t dtype = 0;
  std::int64_t numel = 0, extra = 0;
  bool operator==(const Header& o) const {
    return std::strcmp(op, o.op) == 0 && dtype == o.dtype && numel == o.numel && extra == o.extra;
  }
};

ProcessGroup::ProcessGroup(Transport& transport, std::uint32_t channel, std::size_t chunk_bytes)
    : t_(transport), channel_(channel), chunk_bytes_(std::max<std::size_t>(chunk_bytes, 64)) {}

std::uint64_t ProcessGroup::next_tag() { return (static_cast<std::uint64_t>(channel_) << 32) | ++sequence_; }

// Every rank sends its header to every other; all compare the same set, so all fail together.
void ProcessGroup::agree(const char* op, const Tensor& tensor, std::int64_t extra) {
  Header mine;
  std::strncpy(mine.op, op, sizeof mine.op - 1);
  mine.dtype = static_cast<std::int32_t>(tensor.dtype());
  mine.numel = tensor.numel();
  mine.extra = extra;
  const int n = size(), r = rank();
  std::vector<Header> all(static_cast<std::size_t>(n));
  all[static_cast<std::size_t>(r)] = mine;
  const std::uint64_t tag = next_tag();
  for (int d = 1; d < n; ++d) {
    const int dst = (r + d) % n, src = (r - d + n) % n;
    t_.exchange(dst, &mine, sizeof mine, src, &all[static_cast<std::size_t>(src)], sizeof(Header), tag);
  }
  for (const Header& h : all) {
    if (h == mine) continue;
    std::ostringstream msg;
    msg << op << ": the ranks disagree on the collective:";
    for (int k = 0; k < n; ++k)
      msg << (k ? ";" : "") << " rank " << k << " " << all[static_cast<std::size_t>(k)].op << " of "
          << all[static_cast<std::size_t>(k)].numel << " " << dtype_name(static_cast<DType>(all[static_cast<std::size_t>(k)].dtype))
          << " elements" << (extra ? " (root/part " + std::to_string(all[static_cast<std::size_t>(k)].extra) + ")" : "");
    msg << "; every rank must issue the same collectives with the same shapes, in the same order";
    fail(ErrorKind::shape_mismatch, msg.str());
  }
}

// Sends and receives one segment of a ring step in chunks, pipelined: chunk c + 1 is already on
// the wire (both ways) while chunk c is handed to on_chunk(data, offset, bytes), so the reduction
// of one chunk overlaps the transfer of the next.
// `recv_into` non-null: chunks land there directly (gathers); null: in one of two scratch chunks
// (one being filled while the other is reduced), then on_chunk reduces them into place.
void ProcessGroup::exchange_chunked(int dst, const char* send, int src, char* recv_into, std::size_t send_bytes,
                                    std::size_t recv_bytes,
                                    const std::function<void(const char*, std::size_t, std::size_t)>& on_chunk) {
  const std::uint64_t tag = next_tag();
  const std::size_t scratch_chunk = std::min(chunk_bytes_, recv_bytes);
  if (!recv_into && scratch_.size() < 2 * scratch_chunk) scratch_.resize(2 * scratch_chunk);
  // Each side of a link agrees on its chunk count (the same segment); a side with nothing left
  // (segments differ in size, or are empty) only sends or only receives. All chunks of a link
  // share the tag: the transport matches them in order.
  const std::size_t send_chunks = (send_bytes + chunk_bytes_ - 1) / chunk_bytes_;
  const std::size_t recv_chunks = (recv_bytes + chunk_bytes_ - 1) / chunk_bytes_;
  const std::size_t chunks = std::max(send_chunks, recv_chunks);
  // Appends chunk c's receive (first) and send to `reqs`.
  auto post = [&](std::size_t c, std::vector<Request>& reqs) {
    const std::size_t o = c * chunk_bytes_;
    if (c < recv_chunks) {
      char* into = recv_into ? recv_into + o : scratch_.data() + (c % 2) * scratch_chunk;
      reqs.push_back(t_.post_recv(src, tag, into, std::min(chunk_bytes_, recv_bytes - o)));
    }
    if (c < send_chunks) {
      const std::size_t bytes = std::min(chunk_bytes_, send_bytes - o);
      reqs.push_back(t_.post_send(dst, tag, send + o, bytes));
      bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    }
  };
  std::vector<Request> current, next;
  try {
    if (chunks) post(0, current);
    for (std::size_t c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) post(c + 1, next);
      t_.wait(current);
      if (c < recv_chunks && on_chunk) {
        const Request& r = current.front();
        on_chunk(static_cast<const char*>(r.data), c * chunk_bytes_, r.bytes);
      }
      current = std::move(next);
      next.clear();
    }
  } catch (...) {
    // Whatever failed, nothing stays posted into buffers that may not outlive the failure.
    t_.cancel(current);
    t_.cancel(next);
    throw;
  }
}

void ProcessGroup::ring_reduce_scatter(char* data, const std::vector<std::int64_t>& off, std::size_t elem, DType dtype) {
  const int n = size(), r = rank(), right = (r + 1) % n, left = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; ++s) {
    const int send_seg = (r - s + n) % n, recv_seg = (r - s - 1 + n) % n;
    char* rs = data + off[recv_seg] * elem;
    exchange_chunked(right, data + off[send_seg] * elem, left, nullptr, (off[send_seg + 1] - off[send_seg]) * elem,
                     (off[recv_seg + 1] - off[recv_seg]) * elem, [&](const char* chunk, std::size_t o, std::size_t b) {
                       if (dtype == DType::f32) add_into<float>(rs + o, chunk, b);
                       else if (dtype == DType::bf16) add_into_bf16(rs + o, chunk, b);
                       else add_into<double>(rs + o, chunk, b);
                     });
  }
}

void ProcessGroup::ring_all_gather(char* data, const std::vector<std::int64_t>& off, std::size_t elem) {
  const int n = size(), r = rank(), right = (r + 1) % n, left = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; ++s) {
    const int send_seg = (r + 1 - s + n) % n, recv_seg = (r - s + n) % n;
    char* rs = data + off[recv_seg] * elem;
    exchange_chunked(right, data + off[send_seg] * elem, left, rs, (off[send_seg + 1] - off[send_seg]) * elem,
                     (off[recv_seg + 1] - off[recv_seg]) * elem, nullptr);
  }
}

void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  if (tensor.defined() && tensor.dtype() == DType::bf16) {  // compressed gradients: sums only
    TROUPE_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(), invalid_argument,
                 "all_reduce: needs a dense CPU tensor, got ", tensor.str());
    TROUPE_CHECK(op == ReduceOp::sum, unsupported, "all_reduce: bf16 tensors are summed only; scale the sum in f32");
  } else {
    check_dense_float("all_reduce", tensor);
  }
  agree("all_reduce", tensor, static_cast<std::int64_t>(op));
  if (size() > 1) {
    // After the reduce-scatter rank r holds the full sum of segment r + 1; the all-gather passes them on.
    const auto off = segment_offsets(tensor.numel(), size());
    char* data = static_cast<char*>(tensor.raw_data());
    ring_reduce_scatter(data, off, dtype_size(tensor.dtype()), tensor.dtype());
    ring_all_gather(data, off, dtype_size(tensor.dtype()));
  }
  if (op == ReduceOp::mean) kernels::scale_(tensor, 1.0 / size());
}

Tensor ProcessGroup::all_gather(const Tensor& tensor) {
  TROUPE_CHECK(tensor.defined() && tensor.dim() > 0, invalid_argument, "all_gather: needs a tensor with a dim 0");
  const Tensor dense = tensor.contiguous();
  agree("all_gather", dense, 0);
  Shape shape = dense.shape();
  shape[0] *= size();
  Tensor out = Tensor::empty(shape, dense.dtype());
  const std::size_t bytes = dense.nbytes();
  char* o = static_cast<char*>(out.raw_data());
  std::memcpy(o + rank() * bytes, dense.raw_data(), bytes);
  std::vector<std::int64_t> off(static_cast<std::size_t>(size()) + 1);
  for (int k = 0; k <= size(); ++k) off[k] = k * static_cast<std::int64_t>(bytes);
  // The all-gather half of the ring, one byte per "element"; the ring starts from this rank's part.
  const int n = size(), r = rank(), right = (r + 1) % n, left = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; ++s) {
    const int send_seg = (r - s + n) % n, recv_seg = (r - s - 1 + n) % n;
    char* rs = o + off[recv_seg];
    exchange_chunked(right, o + off[send_seg], left, rs, bytes, bytes, nullptr);
  }
  return out;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& tensor, ReduceOp op) {
  check_dense_float("reduce_scatter", tensor);
  TROUPE_CHECK(tensor.dim() > 0 && tensor.size(0) % size() == 0, shape_mismatch, "reduce_scatter: dim 0 of ",
               tensor.str(), " must split into ", size(), " equal parts (one per rank)");
  agree("reduce_scatter", tensor, static_cast<std::int64_t>(op));
  Tensor work = tensor.clone();
  const std::int64_t part = tensor.numel() / size();
  std::vector<std::int64_t> off(static_cast<std::size_t>(size()) + 1);
  for (int k = 0; k <= size(); ++k) off[k] = k * part;
  // The ring leaves rank r with the sum of segment r + 1, so the parts are rotated by one first.
  char* data = static_cast<char*>(work.raw_data());
  const std::size_t elem = dtype_size(tensor.dtype());
  if (size() > 1) {
    Tensor rotated = Tensor::empty(tensor.shape(), tensor.dtype());
    char* rot = static_cast<char*>(rotated.raw_data());
    for (int k = 0; k < size(); ++k)
      std::memcpy(rot + ((k + 1) % size()) * part * elem, data + k * part * elem, part * elem);
    ring_reduce_scatter(rot, off, elem, tensor.dtype());
    work = rotated;
  }
  Shape shape = tensor.shape();
  shape[0] /= size();
  const int mine = size() > 1 ? (rank() + 1) % size() : 0;
  Tensor out = work.reshape({size(), part}).slice(0, mine, mine + 1).contiguous().reshape(shape);
  if (op == ReduceOp::mean) kernels::scale_(out, 1.0 / size());
  return out;
}

void ProcessGroup::broadcast(const Tensor& tensor, int root) {
  TROUPE_CHECK(root >= 0 && root < size(), invalid_argument, "broadcast: root ", root, " is not a rank of this ",
               size(), "-rank job");
  TROUPE_CHECK(tensor.defined() && tensor.is_contiguous(), invalid_argument, "broadcast: needs a dense tensor");
  agree("broadcast", tensor, root);
  const std::uint64_t tag = next_tag();
  // A chain from the root around the ring: each rank forwards what it received to its right.
  const int n = size(), pos = (rank() - root + n) % n;
  char* data = static_cast<char*>(tensor.raw_data());
  const std::size_t bytes = tensor.nbytes();
  for (std::size_t o = 0; o < bytes || o == 0; o += chunk_bytes_) {
    const std::size_t b = std::min(chunk_bytes_, bytes - std::min(bytes, o));
    if (pos > 0) t_.recv((rank() - 1 + n) % n, tag, data + o, b);
    if (pos < n - 1) t_.send((rank() + 1) % n, tag, data + o, b);
    if (bytes == 0) break;
  }
}

void ProcessGroup::send(const Tensor& tensor, int dst) {
  const Tensor dense = tensor.contiguous();
  const std::int64_t numel = dense.numel();
  const std::uint64_t tag = (static_cast<std::uint64_t>(channel_) << 32) | 0xFFFFFFFFu;  // p2p has its own tag
  t_.send(dst, tag, &numel, sizeof numel);
  t_.send(dst, tag, dense.raw_data(), dense.nbytes());
}

void ProcessGroup::recv(const Tensor& tensor, int src) {
  TROUPE_CHECK(tensor.defined() && tensor.is_contiguous(), invalid_argument, "recv: needs a dense tensor to fill");
  std::int64_t numel = 0;
  const std::uint64_t tag = (static_cast<std::uint64_t>(channel_) << 32) | 0xFFFFFFFFu;
  t_.recv(src, tag, &numel, sizeof numel);
  TROUPE_CHECK(numel == tensor.numel(), shape_mismatch, "recv: rank ", src, " sent ", numel, " elements into ",
               tensor.str(), " on rank ", rank());
  t_.recv(src, tag, tensor.raw_data(), tensor.nbytes());
}

void ProcessGroup::barrier() {
  Tensor token = Tensor::zeros({1}, DType::f32);
  all_reduce(token);
}

Communicator::Communicator(std::unique_ptr<Transport> transport, std::string name, std::uint32_t channel,
                           std::size_t chunk_bytes)
    : transport_(std::move(transport)), name_(std::move(name)), group_(*transport_, channel, chunk_bytes),
      thread_([this] { loop(); }) {}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // Released by a completion callback on the communicator's own thread (a caller's job that failed
  // or finished after everyone else let go, as when a peer died): that thread cannot join itself.
  if (thread_.get_id() == std::this_thread::get_id()) {
    released_->store(true);
    thread_.detach();
    return;
  }
  thread_.join();
}

void Communicator::submit(std::function<void(ProcessGroup&)> work, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(work), std::move(done));
  }
  cv_.notify_all();
}

std::future<void> Communicator::submit(std::function<void(ProcessGroup&)> work) {
  auto promise = std::make_shared<std::promise<void>>();
  auto future = promise->get_future();
  submit(std::move(work), [promise](std::exception_ptr e) {
    if (e) promise->set_exception(e);
    else promise->set_value();
  });
  return future;
}

void Communicator::all_reduce(Tensor tensor, ReduceOp op, Done done) {
  submit([tensor, op](ProcessGroup& g) { g.all_reduce(tensor, op); }, std::move(done));
}

void Communicator::loop() {
  const std::shared_ptr<std::atomic<bool>> released = released_;
  for (;;) {
    {
      std::pair<std::function<void(ProcessGroup&)>, Done> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        job.first(group_);
      } catch (const Error& e) {
        // The transport's own errors already start with the rank (its job rank, in a subgroup).
        const bool ranked = e.message().rfind("rank ", 0) == 0;
        error = std::make_exception_ptr(Error(e.kind(), name_ + " communicator (" + transport_->backend() + "), " +
                                                            (ranked ? "" : "rank " + std::to_string(rank()) + ": ") +
                                                            e.message()));
      } catch (...) {
        error = std::current_exception();
      }
      busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      if (job.second) job.second(error);
    }  // the job's callbacks die here, and with them perhaps the last reference to this communicator
    if (released->load()) return;
  }
}

}  // namespace troupe::transport
