// CUDA kernels of the select ops, as src/cpu/select.cpp: the causal mask of dense [..., T, T]
// scores (row i keeps its keys 0..i, the rest become the attribute "fill").
#include "cuda/element_types.cuh"
#include "cuda/strided.cuh"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

template <class T>
__global__ void mask_after_diagonal(const T* x, T* y, long long total, long long n, double fill) {
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<long long>(blockDim.x) * gridDim.x) {
    const long long j = e % n, i = (e / n) % n;  // key j of query i
    y[e] = j <= i ? x[e] : cuda::store<T>(fill);
  }
}

template <class Host>
void causal_mask_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using T = cuda::DeviceType<Host>;
  const long long total = in[0].numel(), n = in[0].shape().back();
  if (total == 0) return;
  mask_after_diagonal<T><<<cuda::blocks_for(total), cuda::kThreads, 0, cuda::launch_stream()>>>(
      static_cast<const T*>(in[0].raw_data()), static_cast<T*>(out[0].raw_data()), total, n, attrs.get_double("fill"));
  cuda::finish_launch("causal_mask");
}

}  // namespace

TROUPE_REGISTER_CUDA_FLOAT_KERNELS("causal_mask", causal_mask_kernel);

}  // namespace troupe
