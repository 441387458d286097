// CUDA softmax and log-softmax with their backward, and the causal softmax of attention scores
// with its backward, as src/cpu/softmax.cpp. One block per row of [outer, n, inner] (the softmax
// axis of length n, element stride inner); its threads stride over the row and meet in shared
// memory for the row's maximum and sums. bf16 and f16 compute in f32, f64 in double.
#include <math_constants.h>

#include "cuda/block_reduce.cuh"
#include "cuda/element_types.cuh"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::kThreads;
using cuda::load;
using cuda::store;

// Row r of [outer, n, inner]: its first element and stride.
struct Row {
  long long base, stride;
};
__device__ inline Row row_of(long long r, long long n, long long inner) {
  return {r / inner * n * inner + r % inner, inner};
}

// y = softmax(x) (or log-softmax) over each row; `causal`: x is [..., n, n] scores scaled by
// `scale`, and row r sees its first r % n + 1 (the rest are 0 in y).
template <class T, class C>
__global__ void softmax_rows(const T* x, T* y, long long n, long long inner, bool log, bool causal, C scale) {
  const long long r = blockIdx.x;
  const Row row = row_of(r, n, inner);
  const long long valid = causal ? r % n + 1 : n;
  const auto score = [&](long long k) {
    const C v = load<C>(x[row.base + k * row.stride]);
    return causal ? v * scale : v;
  };
  C m = -CUDART_INF_F;
  for (long long k = threadIdx.x; k < valid; k += blockDim.x) m = fmax(m, score(k));
  m = cuda::block_reduce(m, cuda::Combine::max);
  if (isinf(m) && m < 0) m = C(0);  // an all -inf row: no inf - inf
  C s = 0;
  for (long long k = threadIdx.x; k < valid; k += blockDim.x) s += exp(score(k) - m);
  s = cuda::block_reduce(s, cuda::Combine::sum);
  const C lse = m + ::log(s), inv = C(1) / s;
  for (long long k = threadIdx.x; k < n; k += blockDim.x) {
    C v = C(0);
    if (k < valid) v = log ? score(k) - lse : exp(score(k) - m) * inv;
    y[row.base + k * row.stride] = store<T>(v);
  }
}

// softmax: dx = y (g - sum(g y)); log: dx = g - exp(y) sum(g); causal: scale * that, 0 past the row's keys.
template <class T, class C>
__global__ void softmax_backward_rows(const T* g, const T* y, T* dx, long long n, long long inner, bool log, bool causal,
                                      C scale) {
  const long long r = blockIdx.x;
  const Row row = row_of(r, n, inner);
  C s = 0;
  for (long long k = threadIdx.x; k < n; k += blockDim.x) {
    const long long at = row.base + k * row.stride;
    s += log ? load<C>(g[at]) : load<C>(g[at]) * load<C>(y[at]);
  }
  s = cuda::block_reduce(s, cuda::Combine::sum);
  const long long valid = causal ? r % n + 1 : n;
  for (long long k = threadIdx.x; k < n; k += blockDim.x) {
    const long long at = row.base + k * row.stride;
    const C gv = load<C>(g[at]), yv = load<C>(y[at]);
    C d = log ? gv - exp(yv) * s : yv * (gv - s);
    if (causal) d = k < valid ? d * scale : C(0);
    dx[at] = store<T>(d);
  }
}

// [outer, n, inner] of a tensor for a softmax over `axis`.
void layout_of(const Shape& s, int axis, long long& outer, long long& n, long long& inner) {
  outer = inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[static_cast<std::size_t>(i)];
  n = s[static_cast<std::size_t>(axis)];
  for (std::size_t i = static_cast<std::size_t>(axis) + 1; i < s.size(); ++i) inner *= s[i];
}

template <class Host>
void launch_softmax(const Tensor& x, const Tensor& y, int axis, bool log, bool causal, double scale, const char* what) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  long long outer, n, inner;
  layout_of(x.shape(), axis, outer, n, inner);
  if (outer * inner == 0 || n == 0) return;
  softmax_rows<T, C><<<static_cast<unsigned>(outer * inner), kThreads, 0, cuda::launch_stream()>>>(
      static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), n, inner, log, causal, static_cast<C>(scale));
  cuda::finish_launch(what);
}

template <class Host>
void launch_backward(const Tensor& g, const Tensor& y, const Tensor& dx, int axis, bool log, bool causal, double scale,
                     const char* what) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  long long outer, n, inner;
  layout_of(y.shape(), axis, outer, n, inner);
  if (outer * inner == 0 || n == 0) return;
  softmax_backward_rows<T, C><<<static_cast<unsigned>(outer * inner), kThreads, 0, cuda::launch_stream()>>>(
      static_cast<const T*>(g.raw_data()), static_cast<const T*>(y.raw_data()), static_cast<T*>(dx.raw_data()), n, inner,
      log, causal, static_cast<C>(scale));
  cuda::finish_launch(what);
}

// attr "axis" (normalised), "log" (0/1); in[0] x dense, out[0] y dense.
template <class T>
void softmax_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  launch_softmax<T>(in[0], out[0], static_cast<int>(a.get_int("axis")), a.get_int("log") != 0, false, 1.0, "softmax");
}
// in[0] grad, in[1] y.
template <class T>
void softmax_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  launch_backward<T>(in[0], in[1], out[0], static_cast<int>(a.get_int("axis")), a.get_int("log") != 0, false, 1.0,
                     "softmax_backward");
}
// y = softmax(causal_mask(scale * x)) over the last dim of [..., T, T] (attr "scale").
template <class T>
void causal_softmax_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  launch_softmax<T>(in[0], out[0], static_cast<int>(in[0].dim()) - 1, false, true, a.get_double("scale"), "causal_softmax");
}
// in: dy, y; dx = scale * causal_mask(softmax_backward(dy, y), 0).
template <class T>
void causal_softmax_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  launch_backward<T>(in[0], in[1], out[0], static_cast<int>(in[1].dim()) - 1, false, true, a.get_double("scale"),
                     "causal_softmax_backward");
}

}  // namespace

TROUPE_REGISTER_CUDA_FLOAT_KERNELS("softmax", softmax_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("softmax_backward", softmax_backward_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("causal_softmax", causal_softmax_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("causal_softmax_backward", causal_softmax_backward_kernel);

}  // namespace troupe
