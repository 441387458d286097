#pragma once
// What the .cu kernels share about element types: each Troupe dtype's CUDA type, the type it
// computes in (f32 for bf16 and f16, as on the CPU), and loads, stores and conversions between them
// on the device, and the registration of a kernel in every float dtype.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "troupe/kernels/dtype.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::cuda {

/// Host element type T as the device sees it, and the type kernels compute in.
template <class T>
struct CudaType {
  using type = T;
  using compute = T;
};
template <>
struct CudaType<BFloat16> {
  using type = __nv_bfloat16;
  using compute = float;
};
template <>
struct CudaType<Half> {
  using type = __half;
  using compute = float;
};
template <class T>
using DeviceType = typename CudaType<T>::type;
template <class T>
using ComputeOf = typename CudaType<T>::compute;

/// An element of T read as C (a float or double compute type, or a wider integer).
template <class C, class T>
__device__ inline C load(const T& v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return static_cast<C>(__bfloat162float(v));
  else if constexpr (std::is_same_v<T, __half>) return static_cast<C>(__half2float(v));
  else return static_cast<C>(v);
}

/// A value of C rounded to T (to nearest even for bf16 and f16).
template <class T, class C>
__device__ inline T store(C v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (std::is_same_v<C, double>) return __double2bfloat16(v);
    else return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    if constexpr (std::is_same_v<C, double>) return __double2half(v);
    else return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

/// An element of S converted to D, through the wider of the two float types (double for f64 and
/// the integers, float otherwise).
template <class D, class S>
__device__ inline D convert(const S& v) {
  if constexpr (std::is_same_v<D, S>) return v;
  else if constexpr (std::is_same_v<S, __nv_bfloat16> || std::is_same_v<S, __half> || std::is_same_v<S, float>)
    return store<D>(load<float>(v));
  else return store<D>(load<double>(v));
}

}  // namespace troupe::cuda

/// Registers fn<float>, fn<double>, fn<BFloat16> and fn<Half> as the CUDA kernels of `op` in f32,
/// f64, bf16 and f16 (the dtypes of the CPU's float and low-precision kernels).
#define TROUPE_REGISTER_CUDA_FLOAT_KERNELS(op, fn)                 \
  TROUPE_REGISTER_KERNEL(op, cuda, f32, fn<float>);                \
  TROUPE_REGISTER_KERNEL(op, cuda, f64, fn<double>);               \
  TROUPE_REGISTER_KERNEL(op, cuda, bf16, fn<::troupe::BFloat16>);  \
  TROUPE_REGISTER_KERNEL(op, cuda, f16, fn<::troupe::Half>)
