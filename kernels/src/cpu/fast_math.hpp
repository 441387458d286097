#pragma once
// Branch-free float exp for the hot activation kernels, and the clone marker of vectorised loops. std::exp / std::tanh are scalar libm calls
// (~20 ns per gelu element); this form vectorises, and keeps the relative error near 2e-7 (about
// 2 ulp), well inside what f32 training needs. f64 kernels keep libm for the gradient checks.

#include <cstdint>
#include <cstring>

// Marks a hot loop to be compiled twice, for AVX2+FMA machines and for baseline x86-64, with the
// choice made once at load time; elsewhere (other CPUs, sanitizer builds) it compiles once.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define TROUPE_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TROUPE_VECTOR_CLONES
#endif

namespace troupe::cpu {

/// e^x for float, accurate to ~2e-7 relative over [-87, 88]; saturates outside (no inf, no NaN).
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // x = n ln2 + r with |r| <= ln2 / 2; adding 1.5 * 2^23 rounds to the nearest integer.
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;  // ln2 split in two for exactness
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace troupe::cpu
