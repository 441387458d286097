// CPU cross-entropy: one pass per row computing max and log-sum-exp in double.

#include "troupe/kernels/loss.hpp"

#include <cmath>

#include "cpu/float_kernels.hpp"

namespace troupe {
namespace {

// in: logits [N, C] dense, targets i64 dense; out: loss 0-d.
template <class T>
void ce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const T* x = in[0].data<T>();
  const std::int64_t* t = in[1].data<std::int64_t>();
  const std::int64_t n = in[0].shape()[0], c = in[0].shape()[1];
  double total = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    const T* p = x + r * c;
    double m = p[0], s = 0.0;
    for (std::int64_t k = 1; k < c; ++k) m = std::fmax(m, p[k]);
    for (std::int64_t k = 0; k < c; ++k) s += std::exp(p[k] - m);
    total += m + std::log(s) - p[t[r]];
  }
  out[0].data<T>()[0] = static_cast<T>(n > 0 ? total / static_cast<double>(n) : 0.0);
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy", ce_kernel);

// in: grad 0-d, logits, targets; out: dlogits [N, C].
template <class T>
void ce_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const double g = in[0].data<T>()[0];
  const T* x = in[1].data<T>();
  const std::int64_t* t = in[2].data<std::int64_t>();
  T* dx = out[0].data<T>();
  const std::int64_t n = in[1].shape()[0], c = in[1].shape()[1];
  for (std::int64_t r = 0; r < n; ++r) {
    const T* p = x + r * c;
    double m = p[0], s = 0.0;
    for (std::int64_t k = 1; k < c; ++k) m = std::fmax(m, p[k]);
    for (std::int64_t k = 0; k < c; ++k) s += std::exp(p[k] - m);
    for (std::int64_t k = 0; k < c; ++k)
      dx[r * c + k] = static_cast<T>((std::exp(p[k] - m) / s - (k == t[r] ? 1.0 : 0.0)) * g / n);
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("cross_entropy_backward", ce_backward_kernel);

Tensor check(const char* op, const Tensor& logits, const Tensor& targets) {
  cpu::check_float(op, "logits", logits);
  TROUPE_CHECK(logits.dim() == 2 && logits.shape()[1] > 0, shape_mismatch, op, ": logits must be [N, C] with C > 0, got ",
               shape_str(logits.shape()));
  TROUPE_CHECK(targets.defined() && (targets.dtype() == DType::i32 || targets.dtype() == DType::i64), dtype_mismatch,
               op, ": targets must be i32 or i64, got ", targets.str());
  TROUPE_CHECK(targets.shape() == Shape{logits.shape()[0]}, shape_mismatch, op, ": targets shape ",
               shape_str(targets.shape()), " must be [N] for logits ", shape_str(logits.shape()));
  Tensor t = targets.to(DType::i64).contiguous();
  const std::int64_t* p = t.data<std::int64_t>();
  const std::int64_t c = logits.shape()[1];
  for (std::int64_t i = 0; i < t.numel(); ++i)
    TROUPE_CHECK(p[i] >= 0 && p[i] < c, out_of_range, op, ": target ", p[i], " at position ", i,
                 " is outside [0, C) with C = ", c);
  return t;
}

}  // namespace

namespace kernels {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  Tensor t = check("cross_entropy", logits, targets);
  Tensor loss = Tensor::empty({}, logits.dtype());
  std::vector<Tensor> outs{loss};
  dispatch("cross_entropy", {logits.contiguous(), t}, outs);
  return loss;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets) {
  Tensor t = check("cross_entropy_backward", logits, targets);
  cpu::check_float_like("cross_entropy_backward", "grad_loss", grad_loss, "logits", logits);
  TROUPE_CHECK(grad_loss.numel() == 1, shape_mismatch,
               "cross_entropy_backward: grad_loss must be a 0-d tensor, got ", grad_loss.str());
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype());
  std::vector<Tensor> outs{dx};
  dispatch("cross_entropy_backward", {grad_loss.contiguous(), logits.contiguous(), t}, outs);
  return dx;
}

}  // namespace kernels
}  // namespace troupe
