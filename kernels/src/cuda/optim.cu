// CUDA gradient-path kernels, as src/cpu/optim.cpp: the chunked squared L2 norm (its result read by
// the host), in-place scaling, and the SGD and AdamW updates in the parameters' precision (f32 and
// f64), each writing its tensors in place.
#include "cuda/common.hpp"
#include "cuda/strided.cuh"
#include "optim_math.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::check_cuda;
using cuda::kThreads;

// One block per chunk of kernels::kNormChunk elements: a tree reduction in shared memory writes the
// chunk's sum of squares; the host adds the chunk sums in double.
template <class T>
__global__ void chunk_squares(const T* x, long long n, double* partial) {
  __shared__ double sums[kThreads];
  const long long begin = blockIdx.x * static_cast<long long>(kernels::kNormChunk);
  const long long end = min(n, begin + static_cast<long long>(kernels::kNormChunk));
  double s = 0;
  for (long long i = begin + threadIdx.x; i < end; i += kThreads) s += static_cast<double>(x[i]) * x[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

template <class T>
void squared_norm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  cuda::require_dense_equal("squared_norm", in);
  const long long n = in[0].numel();
  const long long chunks = (n + kernels::kNormChunk - 1) / kernels::kNormChunk;
  std::vector<double> host(static_cast<std::size_t>(chunks));
  // The chunk sums come back to the host, so the kernel waits for its stream (the launch stream:
  // a non-blocking stream does not order with the legacy default stream's copies).
  const cudaStream_t stream = cuda::launch_stream();
  if (chunks > 0) {
    const cuda::Scratch partial(sizeof(double) * static_cast<std::size_t>(chunks));
    chunk_squares<T><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(static_cast<const T*>(in[0].raw_data()), n,
                                                                             partial.as<double>());
    check_cuda(cudaGetLastError(), "squared_norm kernel launch");
    check_cuda(cudaMemcpyAsync(host.data(), partial.as<double>(), sizeof(double) * chunks, cudaMemcpyDeviceToHost, stream),
               "squared_norm result copy");
    check_cuda(cudaStreamSynchronize(stream), "squared_norm result copy");
  }
  double total = 0;
  for (double c : host) total += c;
  // Same result layout as the CPU kernel: the double split into hi + lo values of T.
  const T hl[2] = {static_cast<T>(total), static_cast<T>(total - static_cast<double>(static_cast<T>(total)))};
  check_cuda(cudaMemcpyAsync(out[0].raw_data(), hl, sizeof(hl), cudaMemcpyHostToDevice, stream), "squared_norm output copy");
  check_cuda(cudaStreamSynchronize(stream), "squared_norm output copy");  // hl lives on this frame
}

template <class T>
__global__ void scale_elements(T* x, long long n, T s) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x)
    x[i] *= s;
}

template <class T>
void scale_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  const long long n = in[0].numel();
  if (n == 0) return;
  scale_elements<T><<<cuda::blocks_for(n), kThreads, 0, cuda::launch_stream()>>>(static_cast<T*>(in[0].raw_data()), n,
                                                                                 static_cast<T>(a.get_double("scale")));
  cuda::finish_launch("scale_");
}

// SGD with momentum, dampening, Nesterov and weight decay (optim_math.hpp).
template <class T>
__global__ void sgd_elements(T* p, const T* g, T* buf, long long n, double lr, double mom, double wd, double damp,
                             bool nesterov, bool first, T grad_scale) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x)
    kernels::math::sgd_element(p[i], g[i], buf ? buf + i : nullptr, lr, mom, wd, damp, nesterov, first, grad_scale);
}

template <class T>
void sgd_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  const long long n = in[0].numel();
  if (n == 0) return;
  sgd_elements<T><<<cuda::blocks_for(n), kThreads, 0, cuda::launch_stream()>>>(
      static_cast<T*>(in[0].raw_data()), static_cast<const T*>(in[1].raw_data()),
      in[2].defined() ? static_cast<T*>(in[2].raw_data()) : nullptr, n, a.get_double("lr"), a.get_double("momentum"),
      a.get_double("weight_decay"), a.get_double("dampening"), a.get_int("nesterov") != 0, a.get_int("first_step") != 0,
      static_cast<T>(a.get_double("grad_scale")));
  cuda::finish_launch("sgd_update_");
}

// AdamW in the parameters' own precision (optim_math.hpp).
template <class T>
__global__ void adamw_elements(T* p, T* m, T* v, const T* g, long long n, kernels::math::AdamWStep<T> step) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x)
    step(p[i], m[i], v[i], g[i]);
}

template <class T>
void adamw_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  const long long n = in[0].numel();
  if (n == 0) return;
  const kernels::math::AdamWStep<T> step(a.get_double("lr"), a.get_double("beta1"), a.get_double("beta2"),
                                         a.get_double("eps"), a.get_double("weight_decay"),
                                         static_cast<double>(a.get_int("step")), a.get_double("grad_scale"));
  adamw_elements<T><<<cuda::blocks_for(n), kThreads, 0, cuda::launch_stream()>>>(
      static_cast<T*>(in[0].raw_data()), static_cast<T*>(in[2].raw_data()), static_cast<T*>(in[3].raw_data()),
      static_cast<const T*>(in[1].raw_data()), n, step);
  cuda::finish_launch("adamw_update_");
}

}  // namespace

#define TROUPE_CUDA_F32_F64_KERNELS(op, fn)         \
  TROUPE_REGISTER_KERNEL(op, cuda, f32, fn<float>); \
  TROUPE_REGISTER_KERNEL(op, cuda, f64, fn<double>)
TROUPE_CUDA_F32_F64_KERNELS("squared_norm", squared_norm_kernel);
TROUPE_CUDA_F32_F64_KERNELS("scale_", scale_kernel);
TROUPE_CUDA_F32_F64_KERNELS("sgd_update_", sgd_kernel);
TROUPE_CUDA_F32_F64_KERNELS("adamw_update_", adamw_kernel);
#undef TROUPE_CUDA_F32_F64_KERNELS

}  // namespace troupe
