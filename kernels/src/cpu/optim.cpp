// CPU gradient-path kernels: the chunked squared norm, in-place scaling and the optimizer updates,
// each writing its tensors in place; all but SGD's on the pool of cores.
#include "troupe/kernels/optim.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"
#include "cpu/parallel.hpp"
#include "optim_math.hpp"

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
  for (std::int64_t i = 0, n = in[0].numel(); i < n; ++i)
    math::sgd_element(p[i], g[i], buf ? buf + i : nullptr, lr, mom, wd, damp, nesterov, first, s);
}

// The AdamW arithmetic (optim_math.hpp) over distinct (restrict) buffers, so it vectorises: in
// double, f32's square root and division ran at half the lanes and made the update compute-bound
// (0.5 of memcpy bandwidth, `bench/run kernels adamw`).
template <class T>
TROUPE_VECTOR_CLONES void adamw_loop(T* __restrict p, T* __restrict m, T* __restrict v, const T* __restrict g,
                                     std::int64_t n, const math::AdamWStep<T> step) {
  for (std::int64_t i = 0; i < n; ++i) step(p[i], m[i], v[i], g[i]);
}

template <class T>
void adamw_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& a) {
  const math::AdamWStep<T> step(a.get_double("lr"), a.get_double("beta1"), a.get_double("beta2"), a.get_double("eps"),
                                a.get_double("weight_decay"), static_cast<double>(a.get_int("step")),
                                a.get_double("grad_scale"));
  T *p = in[0].data<T>(), *m = in[2].data<T>(), *v = in[3].data<T>();
  const T* g = in[1].data<T>();
  cpu::parallel_ranges(in[0].numel(), cpu::kElementTile, 2.0, [&](std::int64_t begin, std::int64_t end) {
    adamw_loop(p + begin, m + begin, v + begin, g + begin, end - begin, step);
  });
}

}  // namespace

TROUPE_REGISTER_FLOAT_KERNELS("squared_norm", squared_norm_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("scale_", scale_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("sgd_update_", sgd_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("adamw_update_", adamw_kernel);

}  // namespace troupe::kernels
