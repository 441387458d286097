#pragma once
// Dense runs of f32 <-> bf16 / f16 conversions, vectorised (the casts of mixed precision move every
// activation and weight through them), rounding to nearest even as float_to_bf16 and
// float_to_half do, bit for bit.

#include <cstdint>
#include <type_traits>

#include "troupe/kernels/dtype.hpp"

namespace troupe::cpu {

/// dst[i] = float_to_bf16(src[i]) for i < n.
void convert_run(const float* src, BFloat16* dst, std::int64_t n);
/// dst[i] = bf16_to_float(src[i]) for i < n.
void convert_run(const BFloat16* src, float* dst, std::int64_t n);
/// dst[i] = float_to_half(src[i]) for i < n.
void convert_run(const float* src, Half* dst, std::int64_t n);
/// dst[i] = half_to_float(src[i]) for i < n.
void convert_run(const Half* src, float* dst, std::int64_t n);

/// True when convert_run(const S*, D*, n) exists.
template <class S, class D>
inline constexpr bool kHasConvertRun =
    std::is_same_v<S, float> ? (std::is_same_v<D, BFloat16> || std::is_same_v<D, Half>)
                             : (std::is_same_v<D, float> && (std::is_same_v<S, BFloat16> || std::is_same_v<S, Half>));

}  // namespace troupe::cpu
