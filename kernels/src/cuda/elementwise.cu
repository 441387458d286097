// CUDA kernels: elementwise add and the chunked squared L2 norm (f32). They run on the default
// stream and synchronise before returning; stream-per-actor execution comes with the runtime.
#include <cuda_runtime.h>

#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

void check_cuda(cudaError_t rc, const char* what) {
  TROUPE_CHECK(rc == cudaSuccess, runtime, what, " failed: ", cudaGetErrorString(rc));
}

__global__ void add_f32(const float* a, const float* b, float* c, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x)
    c[i] = a[i] + b[i];
}

constexpr int kThreads = 256;

// One block per chunk of kernels::kNormChunk elements: a tree reduction in shared memory writes the
// chunk's sum of squares; the host adds the chunk sums in double.
__global__ void chunk_squares_f32(const float* x, long long n, double* partial) {
  __shared__ float sums[kThreads];
  const long long begin = blockIdx.x * static_cast<long long>(kernels::kNormChunk);
  const long long end = min(n, begin + static_cast<long long>(kernels::kNormChunk));
  float s = 0.f;
  for (long long i = begin + threadIdx.x; i < end; i += kThreads) s += x[i] * x[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

void require_dense_equal(const char* op, const std::vector<Tensor>& in) {
  for (const auto& t : in)
    TROUPE_CHECK(t.is_contiguous() && t.shape() == in[0].shape(), unsupported, op,
                 " on CUDA needs dense inputs of equal shape for now, got ", t.str(), " and ", in[0].str());
}

void add_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  require_dense_equal("add", in);
  const long long n = in[0].numel();
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<long long>((n + kThreads - 1) / kThreads, 65535));
  add_f32<<<blocks, kThreads>>>(static_cast<const float*>(in[0].raw_data()), static_cast<const float*>(in[1].raw_data()),
                                static_cast<float*>(out[0].raw_data()), n);
  check_cuda(cudaGetLastError(), "add kernel launch");
  check_cuda(cudaDeviceSynchronize(), "add kernel");
}

void squared_norm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  require_dense_equal("squared_norm", in);
  const long long n = in[0].numel();
  const long long chunks = (n + kernels::kNormChunk - 1) / kernels::kNormChunk;
  std::vector<double> host(static_cast<std::size_t>(chunks));
  if (chunks > 0) {
    double* partial = nullptr;
    check_cuda(cudaMalloc(&partial, sizeof(double) * chunks), "cudaMalloc");
    chunk_squares_f32<<<static_cast<unsigned>(chunks), kThreads>>>(static_cast<const float*>(in[0].raw_data()), n,
                                                                   partial);
    const cudaError_t launch = cudaGetLastError();
    const cudaError_t copy = cudaMemcpy(host.data(), partial, sizeof(double) * chunks, cudaMemcpyDeviceToHost);
    cudaFree(partial);
    check_cuda(launch, "squared_norm kernel launch");
    check_cuda(copy, "squared_norm result copy");
  }
  double total = 0;
  for (double c : host) total += c;
  // Same result layout as the CPU kernel: the double split into hi + lo floats.
  const float hl[2] = {static_cast<float>(total), static_cast<float>(total - static_cast<float>(total))};
  check_cuda(cudaMemcpy(out[0].raw_data(), hl, sizeof(hl), cudaMemcpyHostToDevice), "squared_norm output copy");
}

}  // namespace

TROUPE_REGISTER_KERNEL("add", cuda, f32, add_kernel);
TROUPE_REGISTER_KERNEL("squared_norm", cuda, f32, squared_norm_kernel);

}  // namespace troupe
