// CUDA gradient-path kernels: the chunked squared L2 norm (f32), with the chunking and result layout
// of the CPU kernel.
#include "cuda/common.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::check_cuda;
using cuda::kThreads;

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

void squared_norm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  cuda::require_dense_equal("squared_norm", in);
  const long long n = in[0].numel();
  const long long chunks = (n + kernels::kNormChunk - 1) / kernels::kNormChunk;
  std::vector<double> host(static_cast<std::size_t>(chunks));
  // The chunk sums come back to the host, so the kernel waits for its stream (the launch stream:
  // a non-blocking stream does not order with the legacy default stream's copies).
  const cudaStream_t stream = cuda::launch_stream();
  if (chunks > 0) {
    double* partial = nullptr;
    check_cuda(cudaMalloc(&partial, sizeof(double) * chunks), "cudaMalloc");
    chunk_squares_f32<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(static_cast<const float*>(in[0].raw_data()),
                                                                              n, partial);
    const cudaError_t launch = cudaGetLastError();
    cudaError_t copy = cudaMemcpyAsync(host.data(), partial, sizeof(double) * chunks, cudaMemcpyDeviceToHost, stream);
    if (copy == cudaSuccess) copy = cudaStreamSynchronize(stream);
    cudaFree(partial);
    check_cuda(launch, "squared_norm kernel launch");
    check_cuda(copy, "squared_norm result copy");
  }
  double total = 0;
  for (double c : host) total += c;
  // Same result layout as the CPU kernel: the double split into hi + lo floats.
  const float hl[2] = {static_cast<float>(total), static_cast<float>(total - static_cast<float>(total))};
  check_cuda(cudaMemcpyAsync(out[0].raw_data(), hl, sizeof(hl), cudaMemcpyHostToDevice, stream), "squared_norm output copy");
  check_cuda(cudaStreamSynchronize(stream), "squared_norm output copy");  // hl lives on this frame
}

}  // namespace

TROUPE_REGISTER_KERNEL("squared_norm", cuda, f32, squared_norm_kernel);

}  // namespace troupe
