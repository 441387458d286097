// CUDA cross-entropy, as src/cpu/loss.cpp: logits [N, C] dense (f32, f64, or bf16 and f16 computed
// in f32), targets i64 dense on the device (the front end checked their range). One block per row
// takes the row's maximum and sum of exponentials in double; the loss is the rows' losses added in
// row order by one thread, so it has the same bits on every run.
#include <math_constants.h>

#include "cuda/block_reduce.cuh"
#include "cuda/element_types.cuh"
#include "cuda/strided.cuh"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::Combine;
using cuda::kThreads;
using cuda::load;
using cuda::store;

// The row's maximum and log of the sum of exp(x - max), in double.
template <class T>
__device__ void row_stats(const T* p, long long c, double& m, double& lse) {
  double v = -CUDART_INF;
  for (long long k = threadIdx.x; k < c; k += blockDim.x) v = fmax(v, load<double>(p[k]));
  m = cuda::block_reduce(v, Combine::max);
  double s = 0;
  for (long long k = threadIdx.x; k < c; k += blockDim.x) s += exp(load<double>(p[k]) - m);
  lse = log(cuda::block_reduce(s, Combine::sum));
}

template <class T>
__global__ void row_losses(const T* x, const long long* targets, double* losses, long long c) {
  const long long r = blockIdx.x;
  double m, lse;
  row_stats(x + r * c, c, m, lse);
  if (threadIdx.x == 0) losses[r] = m + lse - load<double>(x[r * c + targets[r]]);
}

template <class C>
__global__ void mean_loss(const double* losses, long long n, C* loss) {
  double total = 0;
  for (long long r = 0; r < n; ++r) total += losses[r];
  *loss = static_cast<C>(n > 0 ? total / static_cast<double>(n) : 0.0);
}

// dx = (softmax(x) - onehot(target)) * g / N, g the incoming 0-d gradient on the device.
template <class T, class C>
__global__ void row_gradients(const T* x, const long long* targets, const C* grad, T* dx, long long n, long long c) {
  const long long r = blockIdx.x;
  double m, lse;
  row_stats(x + r * c, c, m, lse);
  const double scale = static_cast<double>(*grad) / static_cast<double>(n);
  for (long long k = threadIdx.x; k < c; k += blockDim.x) {
    const double p = exp(load<double>(x[r * c + k]) - m - lse);
    dx[r * c + k] = store<T>(static_cast<C>((p - (k == targets[r] ? 1.0 : 0.0)) * scale));
  }
}

// in: logits [N, C], targets i64 [N]; out: the mean loss, 0-d (f32 for bf16 and f16 logits).
template <class Host>
void ce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  const long long n = in[0].shape()[0], c = in[0].shape()[1];
  const cuda::Scratch losses(sizeof(double) * static_cast<std::size_t>(std::max<long long>(n, 1)));
  if (n > 0)
    row_losses<T><<<static_cast<unsigned>(n), kThreads, 0, cuda::launch_stream()>>>(
        static_cast<const T*>(in[0].raw_data()), static_cast<const long long*>(in[1].raw_data()), losses.as<double>(), c);
  mean_loss<C><<<1, 1, 0, cuda::launch_stream()>>>(losses.as<double>(), n, static_cast<C*>(out[0].raw_data()));
  cuda::finish_launch("cross_entropy");
}

// in: logits, targets, the loss's gradient (0-d); out: dlogits [N, C].
template <class Host>
void ce_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  const long long n = in[0].shape()[0], c = in[0].shape()[1];
  if (n == 0) return;
  row_gradients<T, C><<<static_cast<unsigned>(n), kThreads, 0, cuda::launch_stream()>>>(
      static_cast<const T*>(in[0].raw_data()), static_cast<const long long*>(in[1].raw_data()),
      static_cast<const C*>(in[2].raw_data()), static_cast<T*>(out[0].raw_data()), n, c);
  cuda::finish_launch("cross_entropy_backward");
}

}  // namespace

TROUPE_REGISTER_CUDA_FLOAT_KERNELS("cross_entropy", ce_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("cross_entropy_backward", ce_backward_kernel);

}  // namespace troupe
