#include "grad_compression.hpp"

#include <cmath>
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
  if (text == "bf16") {
    c.kind = Kind::bf16;
    return c;
  }
  const std::string prefix = "powersgd:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string digits = text.substr(prefix.size());
    int r = 0;
    bool ok = !digits.empty() && digits.size() <= 2;
    for (char ch : digits) ok = ok && ch >= '0' && ch <= '9';
    if (ok) r = std::stoi(digits);
    if (ok && r >= 1 && r <= 64) {
      c.kind = Kind::powersgd;
      c.rank = r;
      return c;
    }
  }
  fail(ErrorKind::invalid_argument, "gradient compression '", printable(text),
       "' is not one of none, bf16 or powersgd:R with R from 1 to 64");
}

std::string GradCompression::str() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::bf16: return "bf16";
    case Kind::powersgd: return "powersgd:" + std::to_string(rank);
  }
  return "none";
}

BucketCompressor::BucketCompressor(const std::vector<BucketEntry>& entries, std::int64_t numel, GradCompression how)
    : how_(how), numel_(numel) {
  std::int64_t covered = 0;
  const auto send_whole = [this](std::int64_t begin, std::int64_t end) {
    if (begin == end) return;
    if (!whole_.empty() && whole_.back().second == begin) whole_.back().second = end;
    else whole_.emplace_back(begin, end);
  };
  for (const BucketEntry& e : entries) {
    const std::int64_t size = shape_numel(e.shape);
    send_whole(covered, e.offset);
    covered = e.offset + size;
    const std::int64_t n = e.shape.size() >= 2 ? e.shape[0] : 1, m = n > 0 ? size / n : 0;
    const std::int64_t r = how_.rank;
    // A matrix whose factors are at most half its size; vectors and small matrices go whole.
    if (how_.kind == GradCompression::Kind::powersgd && e.shape.size() >= 2 && r < std::min(n, m) &&
        2 * r * (n + m) <= n * m)
      matrices_.push_back(Matrix{e.offset, n, m, Tensor(), Tensor()});
    else
      send_whole(e.offset, e.offset + size);
  }
  send_whole(covered, numel_);  // ZeRO-1's padding, if any
}

void BucketCompressor::all_reduce(transport::ProcessGroup& g, const Tensor& flat, transport::ReduceOp op,
                                  std::uint64_t step) {
  if (how_.kind == GradCompression::Kind::bf16) {
    const Tensor low = flat.to(DType::bf16);
    g.all_reduce(low, transport::ReduceOp::sum);
    Tensor(flat).copy_from(low);
    if (op == transport::ReduceOp::mean) kernels::scale_(flat, 1.0 / g.size());
    payload_bytes_ = low.nbytes();
    return;
  }
  if (how_.kind == GradCompression::Kind::none || matrices_.empty() ||
      step <= static_cast<std::uint64_t>(how_.warmup_steps)) {
    g.all_reduce(flat, op);
    payload_bytes_ = flat.nbytes();
    return;
  }
  powersgd(g, flat, op);
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
      mx.error = Tensor::zeros({mx.n, mx.m});
    }
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
  payload_bytes_ = static_cast<std::uint64_t>(p_size + whole_size + q_size) * sizeof(float);
}

}  // namespace troupe::actors
