#pragma once
// Element types of tensors and the f16/bf16 <-> f32 conversions (round to nearest even).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace troupe {

/// The element type of a tensor.
enum class DType : std::uint8_t { f32, f16, bf16, i32, i64, u8, f64 };

/// Bytes per element of `t`.
std::size_t dtype_size(DType t);
/// Short name of `t` ("f32", "bf16", ...), as used in errors and file headers.
const char* dtype_name(DType t);
/// Parses a short name ("f32", "bf16", ...); throws troupe::Error for unknown names.
DType parse_dtype(std::string_view name);
/// True for f32, f16, bf16 and f64.
bool is_floating(DType t);
/// True for bf16 and f16, the types mixed precision computes in.
bool is_low_precision(DType t);
/// The dtype a kernel keeps what it accumulates over t's elements in (layer-norm statistics, the
/// attention's log-sum-exp, a loss): f32 for bf16 and f16, t itself otherwise.
DType accumulation_dtype(DType t);

/// IEEE binary16 value stored as its bit pattern.
struct Half {
  std::uint16_t bits = 0;
};
/// bfloat16 value (upper half of an f32) stored as its bit pattern.
struct BFloat16 {
  std::uint16_t bits = 0;
};

/// f32 -> f16 with round-to-nearest-even; overflow gives Inf, NaN stays NaN (quiet).
Half float_to_half(float f);
/// f16 -> f32, exact (subnormals included).
float half_to_float(Half h);

/// f32 -> bf16 with round-to-nearest-even; NaN stays NaN (quiet), Inf stays Inf.
inline BFloat16 float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<std::uint16_t>(u >> 16)};
}
/// bf16 -> f32, exact.
inline float bf16_to_float(BFloat16 b) {
  std::uint32_t u = static_cast<std::uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Maps a C++ element type to its DType (float -> f32, Half -> f16, ...).
template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }

/// Calls `f(T{})` with T the C++ type of `t`; one switch instead of one per kernel.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::u8: return f(std::uint8_t{});
    case DType::f64: return f(double{});
  }
  return f(float{});
}

/// Converts any element type to float (the compute type of the CPU kernels).
template <class T>
inline float to_float(T v) {
  if constexpr (std::is_same_v<T, Half>) return half_to_float(v);
  else if constexpr (std::is_same_v<T, BFloat16>) return bf16_to_float(v);
  else return static_cast<float>(v);
}

/// Converts a double to element type T (round to nearest even for f16/bf16, truncation for integers).
template <class T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) return float_to_half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>) return float_to_bf16(static_cast<float>(v));
  else return static_cast<T>(v);
}

/// Converts element type T to double, exactly.
template <class T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return to_float(v);
  else return static_cast<double>(v);
}

}  // namespace troupe
