// CUDA elementwise kernels, as src/cpu/elementwise.cpp: every binary op (and its scalar form), every
// unary op and its backward, relu's backward with its slope, and bias + gelu with its backward, in
// f32, f64, bf16 and f16 (the low-precision ones read and write their dtype and compute in f32),
// with the math the CPU kernels use (elementwise_math.hpp).
// One grid-stride loop maps N inputs of any strides, broadcast to the output, through the op's
// math; a dense run skips the index arithmetic. They launch on the thread's launch stream and
// return at once (cuda::finish_launch waits outside a stream).
#include <algorithm>
#include <type_traits>

#include "cuda/common.hpp"
#include "cuda/element_types.cuh"
#include "cuda/strided.cuh"
#include "elementwise_math.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::ComputeOf;
using cuda::kThreads;
using cuda::load;
using cuda::store;
using kernels::BinaryOp;
using kernels::UnaryOp;

// The input pointers of one launch (a plain struct: kernel arguments are copied by value).
template <class T, int N>
struct Operands {
  const T* p[N];
};

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

template <class T, class C, int N, class F>
__global__ void map_strided(cuda::Geometry<N> g, T* out, Operands<T, N> in, long long n, F f) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x) {
    long long offsets[N + 1];
    cuda::offsets_of(g, i, offsets);
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
  using T = cuda::DeviceType<Host>;
  using C = ComputeOf<Host>;
  const long long n = out.numel();
  if (n == 0) return;
  Operands<T, N> ptrs{};
  const Tensor* operands[N];
  bool dense = out.is_contiguous();
  for (int k = 0; k < N; ++k) {
    const Tensor& t = in[static_cast<std::size_t>(k)];
    operands[k] = &t;
    ptrs.p[k] = static_cast<const T*>(t.raw_data());
    dense = dense && t.is_contiguous() && t.shape() == out.shape();
  }
  T* dst = static_cast<T*>(out.raw_data());
  if (dense)
    map_dense<T, C, N><<<cuda::blocks_for(n), kThreads, 0, cuda::launch_stream()>>>(dst, ptrs, n, f);
  else
    map_strided<T, C, N><<<cuda::blocks_for(n), kThreads, 0, cuda::launch_stream()>>>(cuda::geometry_of<N>(op, out, operands),
                                                                                     dst, ptrs, n, f);
  cuda::finish_launch(op);
}

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

#define TROUPE_BINARY(op)                                                \
  TROUPE_REGISTER_CUDA_FLOAT_KERNELS(#op, Binary<BinaryOp::op>::kernel); \
  TROUPE_REGISTER_CUDA_FLOAT_KERNELS(#op "_scalar", Binary<BinaryOp::op>::scalar_kernel);
TROUPE_BINARY_OPS(TROUPE_BINARY)
#undef TROUPE_BINARY
#define TROUPE_UNARY(op)                                              \
  TROUPE_REGISTER_CUDA_FLOAT_KERNELS(#op, Unary<UnaryOp::op>::kernel); \
  TROUPE_REGISTER_CUDA_FLOAT_KERNELS(#op "_backward", Unary<UnaryOp::op>::backward_kernel);
TROUPE_SMOOTH_UNARY_OPS(TROUPE_UNARY)
#undef TROUPE_UNARY
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("relu", Unary<UnaryOp::relu>::kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("relu_backward", relu_backward_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("bias_gelu", bias_gelu_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("bias_gelu_backward", bias_gelu_backward_kernel);

}  // namespace troupe
