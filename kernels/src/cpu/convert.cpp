#include "cpu/convert.hpp"

#include <cstring>

#include "cpu/fast_math.hpp"

namespace troupe::cpu {

// Each loop is float_to_bf16 / bf16_to_float on integers, written without branches so that it
// vectorises (16 lanes on AVX-512 machines through the x86-64-v3 clone's 8).
TROUPE_VECTOR_CLONES void convert_run(const float* src, BFloat16* dst, std::int64_t n) {
  const auto* s = reinterpret_cast<const std::uint32_t*>(src);
  auto* d = reinterpret_cast<std::uint16_t*>(dst);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t u = s[i];
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (u >> 16) | 0x40u;  // a NaN stays NaN, whatever its payload
    d[i] = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

TROUPE_VECTOR_CLONES void convert_run(const BFloat16* src, float* dst, std::int64_t n) {
  const auto* s = reinterpret_cast<const std::uint16_t*>(src);
  auto* d = reinterpret_cast<std::uint32_t*>(dst);
  for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<std::uint32_t>(s[i]) << 16;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
// _Float16 converts with the CPU's F16C instructions in the x86-64-v3 clone (IEEE round to
// nearest even, as float_to_half), and through libgcc in the baseline one.
TROUPE_VECTOR_CLONES void convert_run(const float* src, Half* dst, std::int64_t n) {
  auto* d = reinterpret_cast<_Float16*>(dst);
  for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<_Float16>(src[i]);
}

TROUPE_VECTOR_CLONES void convert_run(const Half* src, float* dst, std::int64_t n) {
  const auto* s = reinterpret_cast<const _Float16*>(src);
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
}
#else
void convert_run(const float* src, Half* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void convert_run(const Half* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}
#endif

}  // namespace troupe::cpu
