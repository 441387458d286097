// CPU gradient-path kernels: the chunked squared norm, in-place scaling and the optimizer updates,
// each writing its tensors in place; all but SGD's on the pool of cores.
#include "troupe/kernels/optim.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"
#include "cpu/parallel.hpp"

namespace troupe::kernels {

namespace {

template <class T>
void squared_norm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const T* x = in[0].data<T>();
  const std::int64_t n = in[0].numel();
  // Each chunk's sum on whichever core of the pool, then the chunks' sums in order: the same bits
  // on any cores.
  std::vector<double> chunks(static_cast<std::size_t>((n + kNormChunk - 1) / kNormChunk));
  cpu::parallel_tiles(static_cast<std::int64_t>(chunks.size()), 0.5 * kNormChunk, [&](std::int64_t k) {
    // 16 lanes of T per chunk: short sums (256 terms each) keep the error small and vectorise.
    T lanes[16] = {};
    const std::int64_t c = k * kNormChunk, end = std::min(n, c + kNormChunk);
    std::int64_t i = c;
    for (; i + 16 <= end; i += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += x[i + l] * x[i + l];
    double chunk = 0;
    for (; i < end; ++i) chunk += static_cast<double>(x[i]) * x[i];
    for (T l : lanes) chunk += l;
    chunks[static_cast<std::size_t>(k)] = chunk;
  });
  double total = 0;
  for (double chunk : chunks) total += chunk;
  // The result travels as two values of T (hi + lo) so that no double precision is lost in f32.
  T* hl = out[0].data<T>();
  hl[0] = static_cast<T>(total);
  hl[1] = static_cast<T>(total - static_cast<double>(hl[0]));
}

template <class T>
void scale_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  const T s = static_cast<T>(a.get_double("scale"));
  T* x = in[0].data<T>();
  cpu::parallel_ranges(in[0].numel(), cpu::kElementTile, 0.5, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) x[i] *= s;
  });
}

template <class T>
void sgd_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  T *p = in[0].data<T>(), *buf = in[2].defined() ? in[2].data<T>() : nullptr;
  const T* g = in[1].data<T>();
  const double lr = a.get_double("lr"), mom = a.get_double("momentum"), wd = a.get_double("weight_decay");
  const double damp = a.get_double("dampening");
  const bool nesterov = a.get_int("nesterov") != 0, first = a.get_int("first_step") != 0;
  const T s = static_cast<T>(a.get_double("grad_scale"));  // rounded as scale_ rounds it
  for (std::int64_t i = 0, n = in[0].numel(); i < n; ++i) {
    const T gi = g[i] * s;  // what scale_ would have left in the gradient
    double d = gi + wd * p[i];
    if (mom != 0) {
      const double b = first ? d : mom * buf[i] + (1 - damp) * d;
      buf[i] = static_cast<T>(b);
      d = nesterov ? d + mom * b : b;
    }
    p[i] = static_cast<T>(p[i] - lr * d);
  }
}

// The AdamW arithmetic in the parameters' own precision, as PyTorch computes it, over distinct
// (restrict) buffers, so it vectorises: in double, f32's square root and division ran at half
// the lanes and made the update compute-bound (0.5 of memcpy bandwidth, `bench/run kernels adamw`).
// The coefficients come formed in double and rounded once, as PyTorch's Python scalars are: 1 - b2
// taken in f32 (1 - 0.999f) is 1.3e-5 smaller than PyTorch's 0.001f.
template <class T>
TROUPE_VECTOR_CLONES void adamw_loop(T* __restrict p, T* __restrict m, T* __restrict v, const T* __restrict g,
                                     std::int64_t n, T b1, T b2, T c1, T c2, T eps, T step_size, T decay, T inv_bc2,
                                     T grad_scale) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T gi = g[i] * grad_scale;  // what scale_ would have left in the gradient
    const T mi = b1 * m[i] + c1 * gi;
    const T vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi * inv_bc2) + eps);
  }
}

template <class T>
void adamw_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  const double lr = a.get_double("lr"), b1 = a.get_double("beta1"), b2 = a.get_double("beta2");
  const double eps = a.get_double("eps"), wd = a.get_double("weight_decay");
  const auto step = static_cast<double>(a.get_int("step"));
  const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
  T *p = in[0].data<T>(), *m = in[2].data<T>(), *v = in[3].data<T>();
  const T* g = in[1].data<T>();
  cpu::parallel_ranges(in[0].numel(), cpu::kElementTile, 2.0, [&](std::int64_t begin, std::int64_t end) {
    adamw_loop(p + begin, m + begin, v + begin, g + begin, end - begin, T(b1), T(b2), T(1 - b1), T(1 - b2), T(eps),
               T(lr / bc1), T(1 - lr * wd), T(1 / bc2), static_cast<T>(a.get_double("grad_scale")));
  });
}

}  // namespace

TROUPE_REGISTER_FLOAT_KERNELS("squared_norm", squared_norm_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("scale_", scale_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("sgd_update_", sgd_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("adamw_update_", adamw_kernel);

}  // namespace troupe::kernels
