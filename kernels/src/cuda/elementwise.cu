// CUDA elementwise kernels (f32 add so far). They run on the default stream and synchronise before
// returning; stream-per-actor execution comes with the runtime.
#include <algorithm>

#include "cuda/common.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::check_cuda;
using cuda::kThreads;

__global__ void add_f32(const float* a, const float* b, float* c, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x)
    c[i] = a[i] + b[i];
}

void add_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  cuda::require_dense_equal("add", in);
  const long long n = in[0].numel();
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<long long>((n + kThreads - 1) / kThreads, 65535));
  add_f32<<<blocks, kThreads>>>(static_cast<const float*>(in[0].raw_data()), static_cast<const float*>(in[1].raw_data()),
                                static_cast<float*>(out[0].raw_data()), n);
  check_cuda(cudaGetLastError(), "add kernel launch");
  check_cuda(cudaDeviceSynchronize(), "add kernel");
}

}  // namespace

TROUPE_REGISTER_KERNEL("add", cuda, f32, add_kernel);

}  // namespace troupe
