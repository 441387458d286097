// CUDA elementwise kernels, as src/cpu/elementwise.cpp: every binary op (and its scalar form), every
// unary op and its backward, relu's backward with its slope, and bias + gelu with its backward, in
// f32, f64, bf16 and f16 (the low-precision ones read and write their dtype and compute in f32),
// with the math the CPU kernels use (elementwise_math.hpp).
// One grid-stride loop maps N inputs of any strides, broadcast to the output, through the op's
// math; a dense run skips the index arithmetic. They launch on the thread's launch stream and
// return at once (cuda::finish_launch waits outside a stream).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/common.hpp"
#include "elementwise_math.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::kThreads;
using kernels::BinaryOp;
using kernels::UnaryOp;

constexpr int kMaxDims = 8;

// The element types as CUDA sees them, and the type each computes in.
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

// The input pointers of one launch (a plain struct: kernel arguments are copied by value).
template <class T, int N>
struct Operands {
  const T* p[N];
};

template <class C, class T>
__device__ inline C load(const T& v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return static_cast<C>(v);
}
template <class T, class C>
__device__ inline T store(C v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else return static_cast<T>(v);
}

// CUDA's math functions for the shared elementwise math (elementwise_math.hpp).
struct CudaMath {
  template <class T>
  __device__ static T exp(T x) { return ::exp(x); }
  template <class T>
  __device__ static T gelu_exp(T x) { return ::exp(x); }
  template <class T>
  __device__ static T log(T x) { return ::log(x); }
  template <class T>
  __device__ static T tanh(T x) { return ::tanh(x); }
  template <class T>
  __device__ static T sqrt(T x) { return ::sqrt(x); }
};

using kernels::math::BinaryFn;
using kernels::math::ReluBackwardFn;
using kernels::math::ScalarFn;
template <UnaryOp Op, class T>
using ForwardFn = kernels::math::ForwardFn<Op, CudaMath, T>;
template <UnaryOp Op, class T>
using BackwardFn = kernels::math::BackwardFn<Op, CudaMath, T>;
template <class T>
using BiasGeluFn = kernels::math::BiasGeluFn<CudaMath, T>;
template <class T>
using BiasGeluBackwardFn = kernels::math::BiasGeluBackwardFn<CudaMath, T>;

// The output's shape and every operand's strides (in elements, 0 where broadcast), output first.
template <int N>
struct Geometry {
  int dims = 0;
  long long shape[kMaxDims] = {};
  long long strides[N + 1][kMaxDims] = {};
};

template <class T, class C, int N, class F>
__global__ void map_strided(Geometry<N> g, T* out, Operands<T, N> in, long long n, F f) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x) {
    long long rest = i, offsets[N + 1] = {};
    for (int d = g.dims - 1; d >= 0; --d) {
      const long long index = rest % g.shape[d];
      rest /= g.shape[d];
      for (int k = 0; k <= N; ++k) offsets[k] += index * g.strides[k][d];
    }
    if constexpr (N == 1) out[offsets[0]] = store<T>(f(load<C>(in.p[0][offsets[1]])));
    if constexpr (N == 2) out[offsets[0]] = store<T>(f(load<C>(in.p[0][offsets[1]]), load<C>(in.p[1][offsets[2]])));
    if constexpr (N == 3)
      out[offsets[0]] =
          store<T>(f(load<C>(in.p[0][offsets[1]]), load<C>(in.p[1][offsets[2]]), load<C>(in.p[2][offsets[3]])));
  }
}

template <class T, class C, int N, class F>
__global__ void map_dense(T* out, Operands<T, N> in, long long n, F f) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x) {
    if constexpr (N == 1) out[i] = store<T>(f(load<C>(in.p[0][i])));
    if constexpr (N == 2) out[i] = store<T>(f(load<C>(in.p[0][i]), load<C>(in.p[1][i])));
    if constexpr (N == 3) out[i] = store<T>(f(load<C>(in.p[0][i]), load<C>(in.p[1][i]), load<C>(in.p[2][i])));
  }
}

// Maps the N inputs, broadcast to `out`'s shape, through f into out.
template <class Host, int N, class F>
void map_elements(const char* op, const std::vector<Tensor>& in, Tensor& out, F f) {
  using T = typename CudaType<Host>::type;
  using C = typename CudaType<Host>::compute;
  const long long n = out.numel();
  if (n == 0) return;
  const int rank = static_cast<int>(out.dim());
  TROUPE_CHECK(rank <= kMaxDims, unsupported, op, " on CUDA handles up to ", kMaxDims, " dims, got ", out.str());
  Operands<T, N> ptrs{};
  bool dense = out.is_contiguous();
  for (int k = 0; k < N; ++k) {
    ptrs.p[k] = static_cast<const T*>(in[static_cast<std::size_t>(k)].raw_data());
    dense = dense && in[static_cast<std::size_t>(k)].is_contiguous() && in[static_cast<std::size_t>(k)].shape() == out.shape();
  }
  T* dst = static_cast<T*>(out.raw_data());
  const unsigned blocks = static_cast<unsigned>(std::min<long long>((n + kThreads - 1) / kThreads, 65535));
  if (dense) {
    map_dense<T, C, N><<<blocks, kThreads, 0, cuda::launch_stream()>>>(dst, ptrs, n, f);
  } else {
    Geometry<N> g;
    g.dims = rank;
    for (int d = 0; d < rank; ++d) {
      g.shape[d] = out.shape()[static_cast<std::size_t>(d)];
      g.strides[0][d] = out.strides()[static_cast<std::size_t>(d)];
    }
    for (int k = 0; k < N; ++k) {
      // Broadcast: the input's dims align with the output's last ones; a dim of size 1 repeats.
      const Tensor& t = in[static_cast<std::size_t>(k)];
      const int skip = rank - static_cast<int>(t.dim());
      for (int d = skip; d < rank; ++d) {
        const auto src = static_cast<std::size_t>(d - skip);
        g.strides[k + 1][d] = t.shape()[src] == 1 ? 0 : t.strides()[src];
      }
    }
    map_strided<T, C, N><<<blocks, kThreads, 0, cuda::launch_stream()>>>(g, dst, ptrs, n, f);
  }
  cuda::finish_launch(op);
}

template <class Host>
using ComputeOf = typename CudaType<Host>::compute;

template <BinaryOp Op>
struct Binary {
  template <class T>
  static void kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
    map_elements<T, 2>(kernels::to_string(Op), in, out[0], BinaryFn<Op, ComputeOf<T>>{});
  }
  template <class T>
  static void scalar_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
    using C = ComputeOf<T>;
    map_elements<T, 1>(kernels::to_string(Op), in, out[0], ScalarFn<Op, C>{static_cast<C>(attrs.get_double("value"))});
  }
};

template <UnaryOp Op>
struct Unary {
  template <class T>
  static void kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
    map_elements<T, 1>(kernels::to_string(Op), in, out[0], ForwardFn<Op, ComputeOf<T>>{});
  }
  template <class T>
  static void backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
    map_elements<T, 2>(kernels::to_string(Op), in, out[0], BackwardFn<Op, ComputeOf<T>>{});
  }
};

template <class T>
void relu_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using C = ComputeOf<T>;
  map_elements<T, 2>("relu_backward", in, out[0], ReluBackwardFn<C>{static_cast<C>(attrs.get_double("negative_slope"))});
}
template <class T>
void bias_gelu_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  map_elements<T, 2>("bias_gelu", in, out[0], BiasGeluFn<ComputeOf<T>>{});
}
template <class T>
void bias_gelu_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  map_elements<T, 3>("bias_gelu_backward", in, out[0], BiasGeluBackwardFn<ComputeOf<T>>{});
}

}  // namespace

// Every kernel in f32, f64, bf16 and f16, as on the CPU.
#define TROUPE_CUDA_ELEMENT_KERNELS(op, fn)               \
  TROUPE_REGISTER_KERNEL(op, cuda, f32, fn<float>);       \
  TROUPE_REGISTER_KERNEL(op, cuda, f64, fn<double>);      \
  TROUPE_REGISTER_KERNEL(op, cuda, bf16, fn<BFloat16>);   \
  TROUPE_REGISTER_KERNEL(op, cuda, f16, fn<Half>)
#define TROUPE_BINARY(op)                                         \
  TROUPE_CUDA_ELEMENT_KERNELS(#op, Binary<BinaryOp::op>::kernel); \
  TROUPE_CUDA_ELEMENT_KERNELS(#op "_scalar", Binary<BinaryOp::op>::scalar_kernel);
TROUPE_BINARY_OPS(TROUPE_BINARY)
#undef TROUPE_BINARY
#define TROUPE_UNARY(op)                                        \
  TROUPE_CUDA_ELEMENT_KERNELS(#op, Unary<UnaryOp::op>::kernel); \
  TROUPE_CUDA_ELEMENT_KERNELS(#op "_backward", Unary<UnaryOp::op>::backward_kernel);
TROUPE_SMOOTH_UNARY_OPS(TROUPE_UNARY)
#undef TROUPE_UNARY
TROUPE_CUDA_ELEMENT_KERNELS("relu", Unary<UnaryOp::relu>::kernel);
TROUPE_CUDA_ELEMENT_KERNELS("relu_backward", relu_backward_kernel);
TROUPE_CUDA_ELEMENT_KERNELS("bias_gelu", bias_gelu_kernel);
TROUPE_CUDA_ELEMENT_KERNELS("bias_gelu_backward", bias_gelu_backward_kernel);
#undef TROUPE_CUDA_ELEMENT_KERNELS

}  // namespace troupe
