#include "grad_compression.hpp"

#include <cmath>
#include <ctime>
#include <string>
#include <vector>

#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/matmul.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/rng.hpp"

namespace troupe::actors {

GradCompression GradCompression::parse(const std::string& text) {
  GradCompression c;
  if (text == "none") return c;
  if (text == "bf16" || text == "auto") {
    c.kind = text == "bf16" ? Kind::bf16 : Kind::automatic;
    c.rank = text == "bf16" ? 0 : 16;  // auto: PowerSGD of rank 32 or 16 (lower ranks trail the loss with AdamW)
    return c;
  }
  // "powersgd:R" or "powersgd:R:W": rank R from 1 to 64, W whole steps first (10 by default).
  const std::string prefix = "powersgd:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string rest = text.substr(prefix.size());
    const std::size_t colon = rest.find(':');
    const auto number = [](const std::string& digits, std::size_t most) {
      bool ok = !digits.empty() && digits.size() <= most;
      for (char ch : digits) ok = ok && ch >= '0' && ch <= '9';
      return ok ? std::stoi(digits) : -1;
    };
    const int r = number(rest.substr(0, colon), 2);
    const int w = colon == std::string::npos ? c.warmup_steps : number(rest.substr(colon + 1), 7);
    if (r >= 1 && r <= 64 && w >= 0 && w <= 1000000) {
      c.kind = Kind::powersgd;
      c.rank = r;
      c.warmup_steps = w;
      return c;
    }
  }
  fail(ErrorKind::invalid_argument, "gradient compression '", printable(text),
       "' is not one of none, bf16, powersgd:R (R from 1 to 64; powersgd:R:W sends the first W steps whole, 10 by "
       "default), or auto");
}

std::string GradCompression::str() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::bf16: return "bf16";
    case Kind::powersgd:
      return "powersgd:" + std::to_string(rank) + (warmup_steps == 10 ? "" : ":" + std::to_string(warmup_steps));
    case Kind::automatic: return "auto";
  }
  return "none";
}

namespace {

// The [n, m] view PowerSGD factors a gradient of `shape` as.
std::pair<std::int64_t, std::int64_t> matrix_view(const Shape& shape) {
  const std::int64_t size = shape_numel(shape), n = shape.size() >= 2 ? shape[0] : 1;
  return {n, n > 0 ? size / n : 0};
}

// Whether PowerSGD of rank r factors a gradient of `shape`: a matrix whose factors are at most
// half its size; vectors and small matrices go whole.
bool factored(const Shape& shape, std::int64_t r) {
  const auto [n, m] = matrix_view(shape);
  return shape.size() >= 2 && r < std::min(n, m) && 2 * r * (n + m) <= n * m;
}

// Auto's choices, as a checkpoint holds them: 0 none, 1 bf16, R + 1 powersgd:R.
std::int64_t choice_code(const GradCompression& how) {
  return how.kind == GradCompression::Kind::bf16 ? 1 : how.kind == GradCompression::Kind::powersgd ? how.rank + 1 : 0;
}
GradCompression from_code(std::int64_t code) {
  GradCompression how;
  if (code == 1) how.kind = GradCompression::Kind::bf16;
  if (code >= 2) {
    how.kind = GradCompression::Kind::powersgd;
    how.rank = static_cast<int>(code - 1);
  }
  return how;
}

// Whether `key` is a PowerSGD error's (CompressionState::gather).
bool error_key(const std::string& key) {
  const std::string suffix = ".powersgd_error";
  return key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const Tensor* find(const std::map<std::string, Tensor>& state, const std::string& key) {
  const auto it = state.find(key);
  return it == state.end() ? nullptr : &it->second;
}

}  // namespace

bool CompressionState::holds(const std::string& key) { return key.rfind("grad_compression.", 0) == 0 || error_key(key); }

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

std::pair<std::int64_t, std::int64_t> powersgd_sizes(const std::vector<BucketEntry>& entries, std::int64_t numel,
                                                     std::int64_t r) {
  std::int64_t sent = numel, matrices = 0;
  for (const BucketEntry& e : entries)
    if (factored(e.shape, r)) {
      const auto [n, m] = matrix_view(e.shape);
      sent += r * (n + m) - n * m;
      matrices += n * m;
    }
  return {sent, matrices};
}

BucketCompressor::BucketCompressor(std::vector<BucketEntry> entries, std::int64_t numel, GradCompression how,
                                   std::vector<std::string> names)
    : entries_(std::move(entries)), names_(std::move(names)), numel_(numel) {
  adopt(how);
}

void BucketCompressor::adopt(GradCompression how) {
  how_ = how;
  matrices_.clear();
  whole_.clear();
  std::int64_t covered = 0;
  const auto send_whole = [this](std::int64_t begin, std::int64_t end) {
    if (begin == end) return;
    if (!whole_.empty() && whole_.back().second == begin) whole_.back().second = end;
    else whole_.emplace_back(begin, end);
  };
  for (const BucketEntry& e : entries_) {
    const std::int64_t size = shape_numel(e.shape);
    send_whole(covered, e.offset);
    covered = e.offset + size;
    if (how_.kind == GradCompression::Kind::powersgd && factored(e.shape, how_.rank)) {
      const auto [n, m] = matrix_view(e.shape);
      matrices_.push_back(Matrix{e.offset, n, m, name(e.sink), Tensor(), Tensor()});
    } else {
      send_whole(e.offset, e.offset + size);
    }
  }
  send_whole(covered, numel_);  // ZeRO-1's padding, if any
}

std::string BucketCompressor::name(int sink) const {
  const auto k = static_cast<std::size_t>(sink);
  return k < names_.size() ? names_[k] : "sink" + std::to_string(sink);
}

void BucketCompressor::all_reduce(transport::ProcessGroup& g, const Tensor& flat, transport::ReduceOp op) {
  ++rounds_;
  if (how_.kind == GradCompression::Kind::bf16) {
    const Tensor low = flat.to(DType::bf16);
    g.all_reduce(low, transport::ReduceOp::sum);
    Tensor(flat).copy_from(low);
    if (op == transport::ReduceOp::mean) kernels::scale_(flat, 1.0 / g.size());
    return;
  }
  if (matrices_.empty() || rounds_ <= static_cast<std::uint64_t>(how_.warmup_steps)) {
    g.all_reduce(flat, op);
    return;
  }
  powersgd(g, flat, op);
}

void BucketCompressor::save(std::map<std::string, Tensor>& out) const {
  for (const Matrix& mx : matrices_) {
    if (mx.error.defined()) out[mx.name + ".powersgd_error"] = mx.error.clone();
    if (mx.q.defined()) out["grad_compression." + mx.name + ".q"] = mx.q.clone();
  }
}

void BucketCompressor::load(const std::map<std::string, Tensor>& state, double error_share, bool apply) {
  for (const BucketEntry& e : entries_) {
    const std::string key = name(e.sink) + ".powersgd_error";
    const Tensor* error = find(state, key);
    const auto [n, m] = matrix_view(e.shape);
    const Shape view{n, m};
    TROUPE_CHECK(!error || error->shape() == view, invalid_argument, "gradient compression state '", key, "' has shape ",
                 shape_str(error->shape()), " where the gradient's is ", shape_str(view));
  }
  if (!apply) return;
  for (Matrix& mx : matrices_) {
    if (const Tensor* error = find(state, mx.name + ".powersgd_error"))
      mx.error = kernels::mul(error->to(DType::f32), error_share);
    const Tensor* q = find(state, "grad_compression." + mx.name + ".q");
    if (q && q->shape() == Shape({mx.m, how_.rank})) mx.q = q->to(DType::f32).clone();
  }
}

namespace {

// Makes the columns of p [n, r] orthonormal: Gram-Schmidt in double, twice against the earlier
// columns (once is not enough when a column is nearly in their span), the same bits on every rank,
// which all hold the same reduced p. A column with nothing of its own left (a gradient of lower
// rank than r) becomes zero rather than normalized rounding noise.
void orthonormalize(const Tensor& p) {
  const std::int64_t n = p.size(0), r = p.size(1);
  float* x = p.data<float>();
  std::vector<std::vector<double>> done;
  for (std::int64_t j = 0; j < r; ++j) {
    std::vector<double> col(static_cast<std::size_t>(n));
    double before = 0;
    for (std::int64_t k = 0; k < n; ++k) {
      col[static_cast<std::size_t>(k)] = x[k * r + j];
      before += col[static_cast<std::size_t>(k)] * col[static_cast<std::size_t>(k)];
    }
    for (int pass = 0; pass < 2; ++pass)
      for (const std::vector<double>& q : done) {
        double dot = 0;
        for (std::int64_t k = 0; k < n; ++k) dot += q[static_cast<std::size_t>(k)] * col[static_cast<std::size_t>(k)];
        for (std::int64_t k = 0; k < n; ++k) col[static_cast<std::size_t>(k)] -= dot * q[static_cast<std::size_t>(k)];
      }
    double norm = 0;
    for (double v : col) norm += v * v;
    const bool own = norm > 1e-10 * before && norm > 0;
    norm = std::sqrt(norm);
    for (double& v : col) v = own ? v / norm : 0.0;
    for (std::int64_t k = 0; k < n; ++k) x[k * r + j] = static_cast<float>(col[static_cast<std::size_t>(k)]);
    if (own) done.push_back(std::move(col));
  }
}

}  // namespace

// PowerSGD (Vogels et al. 2019), rank r: with M the gradient plus the error kept from the last
// step, P = M Q is reduced (with the gradients sent whole, in one collective) and orthonormalized,
// Q = M^T P is reduced, and M is replaced by P Q^T; M - P Q^T is the error kept for the next step,
// and Q the next step's start.
void BucketCompressor::powersgd(transport::ProcessGroup& g, const Tensor& flat, transport::ReduceOp op) {
  const std::int64_t r = how_.rank;
  std::int64_t p_size = 0, q_size = 0, whole_size = 0;
  for (const Matrix& mx : matrices_) {
    p_size += mx.n * r;
    q_size += mx.m * r;
  }
  for (const auto& [begin, end] : whole_) whole_size += end - begin;
  const Tensor first = Tensor::empty({p_size + whole_size});
  std::vector<Tensor> grads;
  std::int64_t at = 0;
  for (std::size_t k = 0; k < matrices_.size(); ++k) {
    Matrix& mx = matrices_[k];
    const Tensor grad = flat.slice(0, mx.offset, mx.offset + mx.n * mx.m).view({mx.n, mx.m});
    if (!mx.q.defined()) {  // the first compressed step: the same random start on every rank
      mx.q = Tensor::empty({mx.m, r});
      Generator(0x9e3779b9u + k).normal_(mx.q);
    }
    if (!mx.error.defined()) mx.error = Tensor::zeros({mx.n, mx.m});
    grads.push_back(kernels::add(grad, mx.error));
    first.slice(0, at, at + mx.n * r).view({mx.n, r}).copy_from(kernels::matmul(grads.back(), mx.q));
    at += mx.n * r;
  }
  for (const auto& [begin, end] : whole_) {
    first.slice(0, at, at + end - begin).copy_from(flat.slice(0, begin, end));
    at += end - begin;
  }
  g.all_reduce(first, op);
  at = p_size;
  for (const auto& [begin, end] : whole_) {
    flat.slice(0, begin, end).copy_from(first.slice(0, at, at + end - begin));
    at += end - begin;
  }
  const Tensor qs = Tensor::empty({q_size});
  std::vector<Tensor> ps;
  at = 0;
  std::int64_t at_q = 0;
  for (std::size_t k = 0; k < matrices_.size(); ++k) {
    const Matrix& mx = matrices_[k];
    ps.push_back(first.slice(0, at, at + mx.n * r).view({mx.n, r}));
    orthonormalize(ps.back());
    qs.slice(0, at_q, at_q + mx.m * r).view({mx.m, r}).copy_from(kernels::matmul(grads[k], ps.back(), true, false));
    at += mx.n * r;
    at_q += mx.m * r;
  }
  g.all_reduce(qs, op);
  at_q = 0;
  for (std::size_t k = 0; k < matrices_.size(); ++k) {
    Matrix& mx = matrices_[k];
    mx.q = qs.slice(0, at_q, at_q + mx.m * r).view({mx.m, r}).clone();
    at_q += mx.m * r;
    const Tensor approx = kernels::matmul(ps[k], mx.q, false, true);
    mx.error = kernels::sub(grads[k], approx);
    flat.slice(0, mx.offset, mx.offset + mx.n * mx.m).view({mx.n, mx.m}).copy_from(approx);
  }
}

BucketCompressors::BucketCompressors(const BucketLayout& layout, GradCompression how, std::vector<std::string> names,
                                     std::shared_ptr<transport::Communicator> comm, transport::ReduceOp op)
    : how_(how), comm_(std::move(comm)), op_(op) {
  for (std::size_t b = 0; b < layout.buckets.size(); ++b)
    buckets_.push_back(std::make_shared<BucketCompressor>(layout.buckets[b], layout.numel[b], how, names));
  full_at_.resize(buckets_.size());
}

void BucketCompressors::all_reduce(transport::ProcessGroup& g, std::size_t bucket, const Tensor& flat,
                                   std::chrono::steady_clock::time_point full_at) {
  if (how_.kind != GradCompression::Kind::automatic || decided_) return buckets_[bucket]->all_reduce(g, flat, op_);
  if (bucket == 0 && windows_ms_.size() >= kMeasuredRounds) {
    decide(g);
    return buckets_[bucket]->all_reduce(g, flat, op_);
  }
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_ms();
  buckets_[bucket]->all_reduce(g, flat, op_);
  if (buckets_[bucket]->rounds() == 1) return;  // the first round pays for first touches
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  if (bucket == 0) {
    collective_ms_.emplace_back(buckets_.size(), 0.0);
    collective_cpu_ms_.emplace_back(buckets_.size(), 0.0);
  }
  collective_ms_.back()[bucket] = ms(std::chrono::steady_clock::now() - start);
  collective_cpu_ms_.back()[bucket] = thread_cpu_ms() - cpu_start;
  full_at_[bucket] = full_at;
  if (bucket + 1 < buckets_.size()) return;
  windows_ms_.emplace_back();
  for (const auto& t : full_at_) windows_ms_.back().push_back(std::max(0.0, ms(full_at_.back() - t)));
}

std::map<std::string, Tensor> BucketCompressors::gather() const {
  std::map<std::string, Tensor> out;
  for (const auto& b : buckets_) b->save(out);
  if (!buckets_.empty())
    out["grad_compression.rounds"] = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(buckets_[0]->rounds())}, {});
  if (how_.kind == GradCompression::Kind::automatic && decided_)
    for (const auto& b : buckets_)
      for (const BucketEntry& e : b->entries())
        out["grad_compression." + b->name(e.sink) + ".choice"] = Tensor::from_vector<std::int64_t>({choice_code(b->how())}, {});
  // What the ranks' factors missed, reduced as the gradients are (the same key order on every rank).
  comm_->submit([&](transport::ProcessGroup& g) {
         for (auto& [key, t] : out)
           if (error_key(key)) g.all_reduce(t, op_);
       })
      .get();
  return out;
}

void BucketCompressors::load(const std::map<std::string, Tensor>& state) {
  for (const auto& b : buckets_) b->load(state, 1.0, false);  // every check before anything changes
  const Tensor* rounds = find(state, "grad_compression.rounds");
  TROUPE_CHECK(!rounds || (rounds->numel() == 1 && rounds->dtype() == DType::i64), invalid_argument,
               "gradient compression state 'grad_compression.rounds' is not one integer");
  // Auto's choices come back when every bucket's gradients name one (the same buckets as saved).
  std::vector<GradCompression> choices;
  if (how_.kind == GradCompression::Kind::automatic)
    for (const auto& b : buckets_) {
      std::int64_t code = -1;
      for (const BucketEntry& e : b->entries()) {
        const Tensor* c = find(state, "grad_compression." + b->name(e.sink) + ".choice");
        const std::int64_t got = c && c->numel() == 1 && c->dtype() == DType::i64 ? c->to_vector<std::int64_t>()[0] : -2;
        code = code == -1 || code == got ? got : -2;
      }
      if (code < 0 || code > 65) break;
      choices.push_back(from_code(code));
      choices.back().warmup_steps = how_.warmup_steps;
    }
  if (!choices.empty() && choices.size() == buckets_.size()) {
    adopt(choices);
    std::lock_guard<std::mutex> lock(choice_mutex_);
    choice_ = "auto: as the checkpoint chose: " + describe_choices();
  }
  const double share = op_ == transport::ReduceOp::mean ? 1.0 : 1.0 / comm_->size();
  for (const auto& b : buckets_) {
    b->load(state, share, true);
    if (rounds) b->set_rounds(static_cast<std::uint64_t>(std::max<std::int64_t>(0, rounds->to_vector<std::int64_t>()[0])));
  }
}

std::string BucketCompressors::choice() const {
  std::lock_guard<std::mutex> lock(choice_mutex_);
  return choice_;
}

void BucketCompressors::adopt(const std::vector<GradCompression>& choices) {
  for (std::size_t b = 0; b < buckets_.size(); ++b) buckets_[b]->adopt(choices[b]);
  decided_ = true;
  windows_ms_.clear();
  collective_ms_.clear();
  collective_cpu_ms_.clear();
}

std::string BucketCompressors::describe_choices() const {
  std::string out;
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    out += (b ? ", " : "") + std::string("bucket ") + std::to_string(b) + " " + buckets_[b]->how().str();
  return out;
}

}  // namespace troupe::actors

