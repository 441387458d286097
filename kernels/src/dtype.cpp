#include "troupe/kernels/dtype.hpp"

#include "troupe/kernels/error.hpp"

namespace troupe {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i64: case DType::f64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::f64: return "f64";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::f64})
    if (name == dtype_name(t)) return t;
  fail(ErrorKind::invalid_argument, "unknown dtype '", name, "'; expected one of f32, f64, f16, bf16, i32, i64, u8");
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || is_low_precision(t); }

bool is_low_precision(DType t) { return t == DType::f16 || t == DType::bf16; }

DType accumulation_dtype(DType t) { return is_low_precision(t) ? DType::f32 : t; }

Half float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: keep the top payload bits, force quiet so it cannot become Inf.
    return Half{static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};
  if (a >= 0x477ff000u)  // >= 65520 rounds (to even) past the largest half, 65504: Inf.
    return Half{static_cast<std::uint16_t>(sign | 0x7c00u)};
  if (a < 0x38800000u) {
    // Below 2^-14 the result is subnormal: adding 0.5 makes the FPU round |f| to a multiple of
    // 2^-24 (the half subnormal step) with round-to-nearest-even; the low bits are the mantissa.
    float af;
    std::memcpy(&af, &a, 4);
    af += 0.5f;
    std::uint32_t r;
    std::memcpy(&r, &af, 4);
    return Half{static_cast<std::uint16_t>(sign | (r - 0x3f000000u))};
  }
  const std::uint32_t odd = (a >> 13) & 1u;
  a += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + odd;  // rebias and round to nearest even
  return Half{static_cast<std::uint16_t>(sign | (a >> 13))};
}

float half_to_float(Half h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1fu;
  const std::uint32_t mant = h.bits & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    std::memcpy(&u, &v, 4);
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace troupe
