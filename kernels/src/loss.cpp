// The cross-entropy front ends: checks (every target in range), the outputs, dispatch.
#include "troupe/kernels/loss.hpp"

#include "float_checks.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {
namespace {

// Checks logits [N, C] and targets [N] (each in [0, classes), C by default) and returns the targets
// as dense i64 on the logits' device. The range check reads every target, so it runs on a host copy
// (a CPU tensor is read in place).
Tensor check(const char* op, const Tensor& logits, const Tensor& targets, std::int64_t classes = -1) {
  check_float(op, "logits", logits, true);
  TROUPE_CHECK(logits.dim() == 2 && logits.shape()[1] > 0, shape_mismatch, op, ": logits must be [N, C] with C > 0, got ",
               shape_str(logits.shape()));
  TROUPE_CHECK(targets.defined() && (targets.dtype() == DType::i32 || targets.dtype() == DType::i64), dtype_mismatch,
               op, ": targets must be i32 or i64, got ", targets.str());
  TROUPE_CHECK(targets.shape() == Shape{logits.shape()[0]}, shape_mismatch, op, ": targets shape ",
               shape_str(targets.shape()), " must be [N] for logits ", shape_str(logits.shape()));
  Tensor t = targets.to(Device::cpu()).to(DType::i64).contiguous();
  const std::int64_t* p = t.data<std::int64_t>();
  const std::int64_t c = classes < 0 ? logits.shape()[1] : classes;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    TROUPE_CHECK(p[i] >= 0 && p[i] < c, out_of_range, op, ": target ", p[i], " at position ", i,
                 " is outside [0, C) with C = ", c);
  return t.to(logits.device());
}

// Checks a vocab-parallel op's rows' maximum ([N], the logits' dtype) and, when given, their parts ([N, 2] f64).
void check_rows(const char* op, const Tensor& logits, const Tensor& max, const Tensor& parts) {
  TROUPE_CHECK(max.defined() && max.dtype() == logits.dtype() && max.shape() == Shape{logits.shape()[0]}, shape_mismatch, op,
               ": the rows' maximum must be [N] in the logits' dtype, got ", max.str(), " for logits ", logits.str());
  TROUPE_CHECK(!parts.defined() || (parts.dtype() == DType::f64 && parts.shape() == Shape{logits.shape()[0], 2}), shape_mismatch,
               op, ": the rows' parts must be f64 [N, 2], got ", parts.str(), " for logits ", logits.str());
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  Tensor t = check("cross_entropy", logits, targets);
  Tensor loss = Tensor::empty({}, accumulation_dtype(logits.dtype()), logits.device());
  std::vector<Tensor> outs{loss};
  dispatch("cross_entropy", {logits.contiguous(), t}, outs);
  return loss;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets) {
  Tensor t = check("cross_entropy_backward", logits, targets);
  TROUPE_CHECK(grad_loss.defined() && grad_loss.dtype() == accumulation_dtype(logits.dtype()), dtype_mismatch,
               "cross_entropy_backward: grad_loss ", grad_loss.str(), " must be ", dtype_name(accumulation_dtype(logits.dtype())),
               ", the dtype of the loss of logits ", logits.str());
  TROUPE_CHECK(grad_loss.numel() == 1, shape_mismatch,
               "cross_entropy_backward: grad_loss must be a 0-d tensor, got ", grad_loss.str());
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  std::vector<Tensor> outs{dx};
  dispatch("cross_entropy_backward", {logits.contiguous(), t, grad_loss.contiguous()}, outs);
  return dx;
}

Tensor cross_entropy_parts(const Tensor& logits, const Tensor& targets, const Tensor& max, std::int64_t first,
                           std::int64_t classes) {
  Tensor t = check("cross_entropy_parts", logits, targets, classes);
  check_rows("cross_entropy_parts", logits, max, Tensor());
  TROUPE_CHECK(first >= 0 && first + logits.shape()[1] <= classes, invalid_argument, "cross_entropy_parts: columns [", first, ", ",
               first + logits.shape()[1], ") are not a slice of ", classes, " classes");
  Tensor parts = Tensor::empty({logits.shape()[0], 2}, DType::f64, logits.device());
  std::vector<Tensor> outs{parts};
  dispatch("cross_entropy_parts", {logits.contiguous(), t, max.contiguous()}, outs, Attrs().set("first", first));
  return parts;
}

Tensor cross_entropy_from_parts(const Tensor& parts, DType dtype) {
  TROUPE_CHECK(parts.defined() && parts.dtype() == DType::f64 && parts.dim() == 2 && parts.shape()[1] == 2, shape_mismatch,
               "cross_entropy_from_parts: the parts must be f64 [N, 2], got ", parts.str());
  TROUPE_CHECK(dtype == DType::f32 || dtype == DType::f64, dtype_mismatch, "cross_entropy_from_parts: the loss is f32 or f64, not ",
               dtype_name(dtype));
  Tensor loss = Tensor::empty({}, dtype, parts.device());
  std::vector<Tensor> outs{loss};
  dispatch("cross_entropy_from_parts", {parts.contiguous()}, outs);
  return loss;
}

Tensor cross_entropy_parts_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& max,
                                    const Tensor& parts, std::int64_t first, std::int64_t classes) {
  Tensor t = check("cross_entropy_parts_backward", logits, targets, classes);
  check_rows("cross_entropy_parts_backward", logits, max, parts);
  TROUPE_CHECK(grad_loss.defined() && grad_loss.numel() == 1 && grad_loss.dtype() == accumulation_dtype(logits.dtype()),
               dtype_mismatch, "cross_entropy_parts_backward: grad_loss ", grad_loss.str(), " must be a 0-d ",
               dtype_name(accumulation_dtype(logits.dtype())), " for logits ", logits.str());
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  std::vector<Tensor> outs{dx};
  dispatch("cross_entropy_parts_backward", {logits.contiguous(), t, max.contiguous(), parts.contiguous(), grad_loss.contiguous()},
           outs, Attrs().set("first", first));
  return dx;
}

}  // namespace troupe::kernels
