#pragma once
// Branch-free float exp for the hot activation kernels, and the clone marker of vectorised loops. std::exp / std::tanh are scalar libm calls
// (~20 ns per gelu element); this form vectorises, and keeps the relative error near 2e-7 (about
// 2 ulp), well inside what f32 training needs. f64 kernels keep libm for the gradient checks.

#include <cstdint>
#include <cstring>

// Marks a hot loop to be compiled three times, for AVX-512 machines, AVX2+FMA machines and baseline
// x86-64, with the choice made once at load time; elsewhere (other CPUs, sanitizer builds) it
// compiles once. The AVX-512 and AVX2 forms compute the same bits (the same operations per element,
// reductions in explicit lanes); the AVX-512 form made gelu, its gradient and the casts 1.3-1.5x
// faster on the AMD Zen VM (docs/PERFORMANCE.md).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define TROUPE_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TROUPE_VECTOR_CLONES
#endif

namespace troupe::cpu {

/// The body of fast_exp for a NaN-free x <= 89: clamps below at -104 (so -Inf gives 0).
inline float exp_of_clamped(float x) {
  const float c = x < -104.0f ? -104.0f : x;
  // c = n ln2 + r with |r| <= ln2 / 2; adding 1.5 * 2^23 rounds to the nearest integer.
  const float shifter = 12582912.0f;
  const float n = (c * 1.44269504088896341f + shifter) - shifter;
  const float r = (c - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;  // ln2 split in two for exactness
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n as two factors 2^(n/2) 2^(n - n/2), each a normal float for n in [-150, 129], so the
  // product overflows to +Inf and underflows through the denormals to 0 as IEEE rounding does.
  const std::int32_t ni = static_cast<std::int32_t>(n);
  const std::int32_t half = ni / 2;
  const std::uint32_t bits_a = static_cast<std::uint32_t>(half + 127) << 23;
  const std::uint32_t bits_b = static_cast<std::uint32_t>(ni - half + 127) << 23;
  float scale_a, scale_b;
  std::memcpy(&scale_a, &bits_a, sizeof scale_a);
  std::memcpy(&scale_b, &bits_b, sizeof scale_b);
  return p * scale_a * scale_b;
}

/// e^x for float, accurate to ~2e-7 relative where the result is a normal float; IEEE at the
/// edges: NaN gives NaN, +Inf and x > ln(FLT_MAX) give +Inf, -Inf and x < -104 give 0, and the
/// denormal range between is covered.
inline float fast_exp(float x) {
  // Every step is a select or plain arithmetic so the loop vectorises. The polynomial runs on a
  // clamped, NaN-free copy (a NaN must never reach the float-to-int conversion inside).
  float c = x != x ? 0.0f : x;
  c = c > 89.0f ? 89.0f : c;
  const float e = exp_of_clamped(c);
  return x != x ? x : e;
}

/// fast_exp for x <= 0 or -Inf, never NaN (softmax's x - max): the same bits without the NaN and
/// overflow selects.
inline float fast_exp_nonpositive(float x) { return exp_of_clamped(x); }

}  // namespace troupe::cpu
