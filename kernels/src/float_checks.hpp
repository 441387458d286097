#pragma once
// Argument checks the floating-point front ends share. Kernels are registered for f32 (the training
// dtype) and f64 (for gradient checks by finite differences) on every device; the front ends accept
// those two dtypes (and bf16 and f16 where their kernels have them) and refuse to mix them, since a silent
// conversion would hide the precision a caller asked for.

#include "troupe/kernels/error.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Checks that `t` is defined and f32 or f64, or also bf16 and f16 for a front end whose kernels take
/// them (`low_too`: elementwise ops, convolutions); `op` and `role` name it in the error.
inline void check_float(const char* op, const char* role, const Tensor& t, bool low_too = false) {
  TROUPE_CHECK(t.defined(), invalid_argument, op, ": ", role, " is undefined");
  TROUPE_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64 ||
                   (low_too && is_low_precision(t.dtype())),
               dtype_mismatch, op, ": ", role, " ", t.str(), " must be f32 or f64", low_too ? ", bf16 or f16" : "");
}

/// check_float, and `t` must have the dtype of `like`, the operand named `like_role`.
inline void check_float_like(const char* op, const char* role, const Tensor& t, const char* like_role,
                             const Tensor& like, bool low_too = false) {
  check_float(op, role, t, low_too);
  TROUPE_CHECK(t.dtype() == like.dtype(), dtype_mismatch, op, ": ", role, " ", t.str(), " is ", dtype_name(t.dtype()),
               " but ", like_role, " ", like.str(), " is ", dtype_name(like.dtype()),
               "; convert one of them with .to(DType) first");
}

}  // namespace troupe::kernels
