// CUDA embedding lookup and its backward, as src/cpu/embedding.cpp: weight [V, D] (rows from
// attribute "first" of the table), ids i64 dense on the device (checked by the front end). The
// backward gives each thread one column of the table's gradient and adds the ids' rows in order,
// so it needs no atomics and has the same bits on every run; bf16 and f16 rows are summed in f32
// and rounded once.
#include "cuda/element_types.cuh"
#include "cuda/strided.cuh"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::kThreads;
using cuda::load;
using cuda::store;

template <class T>
__global__ void gather_rows(const T* w, const long long* ids, T* y, long long v, long long d, long long n, long long first) {
  const long long total = n * d;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(blockDim.x) * gridDim.x) {
    const long long row = ids[i / d] - first;
    y[i] = row >= 0 && row < v ? w[row * d + i % d] : store<T>(0.0f);
  }
}

// sums[row, j] += g[i, j] over the ids in order, one thread per column j; then dw = sums.
template <class T, class C>
__global__ void scatter_columns(const T* g, const long long* ids, C* sums, T* dw, long long v, long long d, long long n,
                                long long first) {
  for (long long j = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; j < d;
       j += static_cast<long long>(blockDim.x) * gridDim.x) {
    for (long long row = 0; row < v; ++row) sums[row * d + j] = C(0);
    for (long long i = 0; i < n; ++i) {
      const long long row = ids[i] - first;
      if (row >= 0 && row < v) sums[row * d + j] += load<C>(g[i * d + j]);
    }
    if (static_cast<const void*>(sums) != static_cast<const void*>(dw))
      for (long long row = 0; row < v; ++row) dw[row * d + j] = store<T>(sums[row * d + j]);
  }
}

// in: weight [V, D], ids; out: y [n, D], zero rows for ids outside the rows held.
template <class Host>
void embedding_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using T = cuda::DeviceType<Host>;
  const long long v = in[0].shape()[0], d = in[0].shape()[1], n = in[1].numel();
  if (n * d == 0) return;
  gather_rows<T><<<cuda::blocks_for(n * d), kThreads, 0, cuda::launch_stream()>>>(
      static_cast<const T*>(in[0].raw_data()), static_cast<const long long*>(in[1].raw_data()),
      static_cast<T*>(out[0].raw_data()), v, d, n, attrs.get_int("first"));
  cuda::finish_launch("embedding");
}

// in: grad [n*D] dense, ids; out: dw [V, D].
template <class Host>
void embedding_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  const long long v = out[0].shape()[0], d = out[0].shape()[1], n = in[1].numel();
  if (v * d == 0) return;
  const bool wide = !std::is_same_v<T, C>;
  const cuda::Scratch sums(wide ? sizeof(C) * static_cast<std::size_t>(v * d) : 1);
  auto* dw = static_cast<T*>(out[0].raw_data());
  scatter_columns<T, C><<<cuda::blocks_for(d), kThreads, 0, cuda::launch_stream()>>>(
      static_cast<const T*>(in[0].raw_data()), static_cast<const long long*>(in[1].raw_data()),
      wide ? sums.as<C>() : reinterpret_cast<C*>(dw), dw, v, d, n, attrs.get_int("first"));
  cuda::finish_launch("embedding_backward");
}

}  // namespace

TROUPE_REGISTER_CUDA_FLOAT_KERNELS("embedding", embedding_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("embedding_backward", embedding_backward_kernel);

}  // namespace troupe
