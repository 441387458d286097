#pragma once
// Registration of the floating-point CPU kernels: each is one template over its element type,
// registered for f32 (float) and f64 (double), the two dtypes the front ends accept
// (float_checks.hpp), and for bf16 and f16 where a kernel has a low-precision version.

#include "troupe/kernels/registry.hpp"

/// Registers fn<float> as the kernel for (op, cpu, f32) and fn<double> for (op, cpu, f64).
#define TROUPE_REGISTER_FLOAT_KERNELS(op, fn)     \
  TROUPE_REGISTER_KERNEL(op, cpu, f32, fn<float>); \
  TROUPE_REGISTER_KERNEL(op, cpu, f64, fn<double>)

/// Registers fn<BFloat16> as the kernel for (op, cpu, bf16) and fn<Half> for (op, cpu, f16): the
/// low-precision kernels, which read and write bf16 or f16 and compute in f32.
#define TROUPE_REGISTER_LOW_PRECISION_KERNELS(op, fn)          \
  TROUPE_REGISTER_KERNEL(op, cpu, bf16, fn<::troupe::BFloat16>); \
  TROUPE_REGISTER_KERNEL(op, cpu, f16, fn<::troupe::Half>)
