#pragma once
// Registration of the floating-point CPU kernels: each is one template over its element type,
// registered for f32 (float) and f64 (double), the two dtypes the front ends accept
// (float_checks.hpp).

#include "troupe/kernels/registry.hpp"

/// Registers fn<float> as the kernel for (op, cpu, f32) and fn<double> for (op, cpu, f64).
#define TROUPE_REGISTER_FLOAT_KERNELS(op, fn)     \
  TROUPE_REGISTER_KERNEL(op, cpu, f32, fn<float>); \
  TROUPE_REGISTER_KERNEL(op, cpu, f64, fn<double>)
