// The softmax front ends: checks, the normalised axis, dense inputs, dispatch. bf16 and f16 are
// computed along the last axis, so another axis is moved there and back.
#include "troupe/kernels/softmax.hpp"

#include "float_checks.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {
namespace {

// Softmax or, with `log`, log-softmax of x along `axis`; `op` names the caller in errors.
Tensor forward(const char* op, const Tensor& x, std::int64_t axis, bool log) {
  check_float(op, "x", x, true);
  TROUPE_CHECK(x.dim() > 0, invalid_argument, op, ": needs at least one dimension, got ", x.str());
  const int ax = normalize_axis(axis, x.shape().size(), op);
  const int last = static_cast<int>(x.dim()) - 1;
  if (is_low_precision(x.dtype()) && ax != last)  // the low-precision kernels take rows
    return forward(op, x.transpose(ax, last), last, log).transpose(ax, last).contiguous();
  Tensor xd = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  std::vector<Tensor> outs{y};
  dispatch("softmax", {xd}, outs, Attrs().set("axis", std::int64_t{ax}).set("log", std::int64_t{log ? 1 : 0}));
  return y;
}

// The gradient of forward() from its output y; `op` names the caller in errors.
Tensor backward(const char* op, const Tensor& grad, const Tensor& y, std::int64_t axis, bool log) {
  check_float(op, "grad", grad, true);
  check_float_like(op, "y", y, "grad", grad, true);
  TROUPE_CHECK(grad.shape() == y.shape(), shape_mismatch, op, ": grad shape ", shape_str(grad.shape()),
               " does not match y shape ", shape_str(y.shape()));
  TROUPE_CHECK(y.dim() > 0, invalid_argument, op, ": needs at least one dimension, got ", y.str());
  const int ax = normalize_axis(axis, y.shape().size(), op);
  const int last = static_cast<int>(y.dim()) - 1;
  if (is_low_precision(y.dtype()) && ax != last)  // the low-precision kernels take rows
    return backward(op, grad.transpose(ax, last), y.transpose(ax, last), last, log).transpose(ax, last).contiguous();
  Tensor gd = grad.contiguous(), yd = y.contiguous();
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  std::vector<Tensor> outs{dx};
  dispatch("softmax_backward", {gd, yd}, outs,
           Attrs().set("axis", std::int64_t{ax}).set("log", std::int64_t{log ? 1 : 0}));
  return dx;
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t axis) { return forward("softmax", x, axis, false); }

Tensor log_softmax(const Tensor& x, std::int64_t axis) { return forward("log_softmax", x, axis, true); }

Tensor softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t axis) {
  return backward("softmax_backward", grad, y, axis, false);
}

Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t axis) {
  return backward("log_softmax_backward", grad, y, axis, true);
}

namespace {
// The checks of the causal softmax's scores (or their gradient), naming `op` and `role`.
void check_scores(const char* op, const char* role, const Tensor& t) {
  check_float(op, role, t, true);
  TROUPE_CHECK(t.dim() >= 2 && t.size(-1) == t.size(-2), shape_mismatch, op, ": ", role, " must be [..., T, T] scores ",
               "(queries x keys), got ", t.str());
}
}  // namespace

Tensor causal_softmax(const Tensor& x, double scale) {
  check_scores("causal_softmax", "x", x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  std::vector<Tensor> outs{y};
  dispatch("causal_softmax", {x.contiguous()}, outs, Attrs().set("scale", scale));
  return y;
}

Tensor causal_softmax_backward(const Tensor& grad, const Tensor& y, double scale) {
  const char* op = "causal_softmax_backward";
  check_scores(op, "y", y);
  check_float_like(op, "grad", grad, "y", y, true);
  TROUPE_CHECK(grad.shape() == y.shape(), shape_mismatch, op, ": grad shape ", shape_str(grad.shape()),
               " does not match y shape ", shape_str(y.shape()));
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  std::vector<Tensor> outs{dx};
  dispatch(op, {grad.contiguous(), y.contiguous()}, outs, Attrs().set("scale", scale));
  return dx;
}

}  // namespace troupe::kernels
