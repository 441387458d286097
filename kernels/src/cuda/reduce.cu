// CUDA reductions, as src/cpu/reduce.cpp: in[0] dense [outer, extent, inner] of T reduced over
// `extent` into out[0] dense [outer, inner] of O (T's dtype, f32, bf16 or f16); attrs "extent",
// "inner", "mode" (0 sum, 1 mean, 2 max). One thread per output adds its column's terms in order,
// in double, so the result is the CPU's up to the rounding of the double sum (rows of one output
// are reduced by one thread: bias gradients and row sums have many outputs).
#include <math_constants.h>

#include "cuda/element_types.cuh"
#include "cuda/strided.cuh"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

template <class T, class O>
__global__ void reduce_columns(const T* x, O* y, long long outer, long long extent, long long inner, int mode) {
  const long long n = outer * inner;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x) {
    const long long o = i / inner, c = i % inner;
    const T* p = x + o * extent * inner + c;
    double acc = mode == 2 ? -CUDART_INF : 0.0;
    for (long long j = 0; j < extent; ++j) {
      const double v = cuda::load<double>(p[j * inner]);
      if (mode == 2) acc = (v > acc || v != v) && acc == acc ? v : acc;  // NaN, once taken, stays
      else acc += v;
    }
    if (mode == 1) acc = extent > 0 ? acc / static_cast<double>(extent) : CUDART_NAN;
    y[i] = cuda::store<O>(acc);
  }
}

template <class T>
void reduce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const long long extent = a.get_int("extent"), inner = a.get_int("inner");
  const int mode = static_cast<int>(a.get_int("mode"));
  const long long outer = inner > 0 ? out[0].numel() / inner : 0;
  if (outer == 0) return;
  visit_dtype(out[0].dtype(), [&](auto tag) {
    using O = decltype(tag);
    if constexpr (std::is_same_v<O, T> || std::is_same_v<O, float> || std::is_same_v<O, BFloat16> ||
                  std::is_same_v<O, Half>) {
      using DT = cuda::DeviceType<T>;
      using DO = cuda::DeviceType<O>;
      reduce_columns<DT, DO><<<cuda::blocks_for(outer * inner), cuda::kThreads, 0, cuda::launch_stream()>>>(
          static_cast<const DT*>(in[0].raw_data()), static_cast<DO*>(out[0].raw_data()), outer, extent, inner, mode);
    } else {
      fail(ErrorKind::dtype_mismatch, "reduce: a ", dtype_name(in[0].dtype()), " input cannot be reduced into ",
           dtype_name(out[0].dtype()));
    }
  });
  cuda::finish_launch("reduce");
}

}  // namespace

TROUPE_REGISTER_CUDA_FLOAT_KERNELS("reduce", reduce_kernel);

}  // namespace troupe
