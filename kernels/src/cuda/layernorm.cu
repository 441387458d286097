// CUDA layer normalisation over the last dimension, as src/cpu/layernorm.cpp: inputs dense, seen
// as [rows, D]. One block per row; the row's sums are taken in double (the CPU combines its float
// lanes in double), the mean and rstd kept in the compute type (f32 for f32, bf16 and f16 rows)
// as the CPU keeps them, y in the compute type and rounded once. The backward's dgamma and dbeta
// are column sums over the rows, one thread per column, in double.
#include "cuda/block_reduce.cuh"
#include "cuda/element_types.cuh"
#include "cuda/strided.cuh"
#include "layernorm_y.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::Combine;
using cuda::kThreads;
using cuda::load;
using cuda::store;

// Normalises row `p` (d elements of T, or of the sum a + b rounded to T when b is given) into y,
// with the row's mean and rstd; with b, the sum is written to s.
template <class T, class Y, class C>
__global__ void layernorm_rows(const T* x, const T* add, long long add_rows, const T* gamma, const T* beta, T* sum, Y* y,
                               C* mean, C* rstd, long long d, double eps) {
  const long long r = blockIdx.x;
  const T* p = x + r * d;
  const T* q = add ? add + (r % add_rows) * d : nullptr;
  // The row's element k: x, or the sum rounded to T as the add kernel rounds it (kept in s).
  const auto element = [&](long long k) -> C {
    if (!q) return load<C>(p[k]);
    const T v = store<T>(load<C>(p[k]) + load<C>(q[k]));
    return load<C>(v);
  };
  double s = 0;
  for (long long k = threadIdx.x; k < d; k += blockDim.x) s += static_cast<double>(element(k));
  const C m = static_cast<C>(cuda::block_reduce(s, Combine::sum) / static_cast<double>(d));
  double v = 0;
  for (long long k = threadIdx.x; k < d; k += blockDim.x) {
    const C e = element(k) - m;
    v += static_cast<double>(e * e);
  }
  const C rs = static_cast<C>(1.0 / sqrt(cuda::block_reduce(v, Combine::sum) / static_cast<double>(d) + eps));
  for (long long k = threadIdx.x; k < d; k += blockDim.x) {
    const C e = element(k);
    if (sum) sum[r * d + k] = store<T>(e);
    y[r * d + k] = store<Y>((e - m) * rs * load<C>(gamma[k]) + load<C>(beta[k]));
  }
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

// dx of each row: rstd (dy g - s1 - xhat s2), s1 and s2 the row's means of dy g and dy g xhat;
// plus `more` (another gradient of x) when given.
template <class T, class C>
__global__ void layernorm_backward_rows(const T* dy, const T* x, const T* gamma, const C* mean, const C* rstd,
                                        const T* more, T* dx, long long d) {
  const long long r = blockIdx.x;
  const C m = mean[r], rs = rstd[r];
  double s1 = 0, s2 = 0;
  for (long long k = threadIdx.x; k < d; k += blockDim.x) {
    const C xh = (load<C>(x[r * d + k]) - m) * rs, dxh = load<C>(dy[r * d + k]) * load<C>(gamma[k]);
    s1 += static_cast<double>(dxh);
    s2 += static_cast<double>(dxh * xh);
  }
  const C a = static_cast<C>(cuda::block_reduce(s1, Combine::sum) / static_cast<double>(d));
  const C b = static_cast<C>(cuda::block_reduce(s2, Combine::sum) / static_cast<double>(d));
  for (long long k = threadIdx.x; k < d; k += blockDim.x) {
    const long long at = r * d + k;
    const C xh = (load<C>(x[at]) - m) * rs;
    C v = rs * (load<C>(dy[at]) * load<C>(gamma[k]) - a - xh * b);
    if (more) v = load<C>(more[at]) + v;
    dx[at] = store<T>(v);
  }
}

// dgamma[k] = sum over rows of dy xhat, dbeta[k] = sum of dy.
template <class T, class C>
__global__ void layernorm_parameter_grads(const T* dy, const T* x, const C* mean, const C* rstd, T* dgamma, T* dbeta,
                                          long long rows, long long d) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < d;
       k += static_cast<long long>(blockDim.x) * gridDim.x) {
    double g = 0, b = 0;
    for (long long r = 0; r < rows; ++r) {
      const C gy = load<C>(dy[r * d + k]), xh = (load<C>(x[r * d + k]) - mean[r]) * rstd[r];
      g += static_cast<double>(gy * xh);
      b += static_cast<double>(gy);
    }
    dgamma[k] = store<T>(g);
    dbeta[k] = store<T>(b);
  }
}

template <class Host>
void launch_forward(const Tensor& x, const Tensor* add, const Tensor& gamma, const Tensor& beta, const Tensor* sum,
                    const Tensor& y, const Tensor& mean, const Tensor& rstd, double eps, const char* what) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  const long long d = x.shape().back(), rows = d > 0 ? x.numel() / d : 0;
  if (rows == 0) return;
  with_y_type<Host>(y.dtype(), [&](auto y_type) {
    using Y = cuda::DeviceType<decltype(y_type)>;
    layernorm_rows<T, Y, C><<<static_cast<unsigned>(rows), kThreads, 0, cuda::launch_stream()>>>(
        static_cast<const T*>(x.raw_data()), add ? static_cast<const T*>(add->raw_data()) : nullptr,
        add ? add->numel() / d : 1, static_cast<const T*>(gamma.raw_data()), static_cast<const T*>(beta.raw_data()),
        sum ? static_cast<T*>(sum->raw_data()) : nullptr, static_cast<Y*>(y.raw_data()), static_cast<C*>(mean.raw_data()),
        static_cast<C*>(rstd.raw_data()), d, eps);
  });
  cuda::finish_launch(what);
}

// in: x, gamma, beta; out: y, mean, rstd; attr "eps".
template <class T>
void layernorm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  launch_forward<T>(in[0], nullptr, in[1], in[2], nullptr, out[0], out[1], out[2], a.get_double("eps"), "layernorm");
}

// in: a, b (a's last dims, repeated over its leading ones), gamma, beta; out: s = a + b, y, mean, rstd.
template <class T>
void add_layernorm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  launch_forward<T>(in[0], &in[1], in[2], in[3], &out[0], out[1], out[2], out[3], a.get_double("eps"), "add_layernorm");
}

// in: dy, x, gamma, mean, rstd and optionally another gradient of x to add to dx; out: dx, dgamma, dbeta.
template <class Host>
void layernorm_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  const long long d = in[1].shape().back(), rows = in[3].numel();
  const auto* dy = static_cast<const T*>(in[0].raw_data());
  const auto* x = static_cast<const T*>(in[1].raw_data());
  const auto* mean = static_cast<const C*>(in[3].raw_data());
  const auto* rstd = static_cast<const C*>(in[4].raw_data());
  if (rows > 0 && d > 0)
    layernorm_backward_rows<T, C><<<static_cast<unsigned>(rows), kThreads, 0, cuda::launch_stream()>>>(
        dy, x, static_cast<const T*>(in[2].raw_data()), mean, rstd,
        in.size() > 5 ? static_cast<const T*>(in[5].raw_data()) : nullptr, static_cast<T*>(out[0].raw_data()), d);
  if (d > 0)
    layernorm_parameter_grads<T, C><<<cuda::blocks_for(d), kThreads, 0, cuda::launch_stream()>>>(
        dy, x, mean, rstd, static_cast<T*>(out[1].raw_data()), static_cast<T*>(out[2].raw_data()), rows, d);
  cuda::finish_launch("layernorm_backward");
}

}  // namespace

TROUPE_REGISTER_CUDA_FLOAT_KERNELS("layernorm", layernorm_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("add_layernorm", add_layernorm_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("layernorm_backward", layernorm_backward_kernel);

}  // namespace troupe
