// CPU softmax / log-softmax. Inputs are made dense by the front end; the kernels walk the tensor
// as [outer, n, inner] with the softmax axis of length n and element stride inner (1 for bf16 and
// f16, whose axis the front end moves last).

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"
#include "cpu/low_rows.hpp"
#include "cpu/parallel.hpp"
#include "cpu/softmax_row.hpp"

namespace troupe {

namespace cpu {
// The f32 softmax row (cpu/softmax_row.hpp): a select for the max, the fast exp of x - max <= 0
// (masked -inf scores give exactly 0; a NaN or +Inf score makes the whole row NaN, as in IEEE
// arithmetic), their sum in eight float lanes. The next row's bytes are prefetched while this
// row's exponentials run, so the next max pass does not wait on memory. The scores from `valid` on
// are not read: their exponentials are written as exact zeros without being computed, and the sum
// still runs over all n in the same lanes, so a causal row gives the bits its -inf would.
TROUPE_VECTOR_CLONES void softmax_row(const float* __restrict x, float* __restrict y, std::int64_t n, bool log,
                                      const float* next, std::int64_t valid) {
  // The max in an 8-float vector (GCC's vector extension): a running select is a reduction GCC
  // does not vectorise without -ffinite-math-only, and this pass is the one that reads the row
  // from memory. A NaN never wins the comparison, as in the scalar form.
  using Lanes = float __attribute__((vector_size(32)));
  using Mask = int __attribute__((vector_size(32)));
  // Four vectors of running maxima, 32 elements a round: one would wait on its own select every
  // eight elements.
  Lanes top[4];
  for (Lanes& t : top) {
    t = Lanes{};
    t -= std::numeric_limits<float>::infinity();
  }
  Mask nan = {};
  std::int64_t i = 0;
  for (; i + 32 <= valid; i += 32)
    for (int q = 0; q < 4; ++q) {
      Lanes v;
      std::memcpy(&v, x + i + 8 * q, sizeof v);
      top[q] = v > top[q] ? v : top[q];
      nan |= v != v;
    }
  for (; i + 8 <= valid; i += 8) {
    Lanes v;
    std::memcpy(&v, x + i, sizeof v);
    top[0] = v > top[0] ? v : top[0];
    nan |= v != v;
  }
  for (int q = 1; q < 4; ++q) top[0] = top[q] > top[0] ? top[q] : top[0];
  float m = -std::numeric_limits<float>::infinity();
  bool bad = false;
  for (; i < valid; ++i) {
    m = x[i] > m ? x[i] : m;
    bad = bad || x[i] != x[i];
  }
  for (int l = 0; l < 8; ++l) {
    m = top[0][l] > m ? top[0][l] : m;
    bad = bad || nan[l] != 0;
  }
  // A NaN or +Inf score makes the whole row NaN, as the IEEE arithmetic would (x - max is NaN
  // there, and so is the sum); every other x - max is <= 0 or -Inf, for the exp without edge selects.
  if (bad || m == std::numeric_limits<float>::infinity()) {
    std::fill(y, y + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  if (std::isinf(m)) m = 0.0f;  // all -inf row: avoid inf - inf
  // The exponentials, a plain map that vectorises whole (x and y are __restrict, or GCC re-checks
  // their overlap every eight elements), then their sum from the row in cache in eight float lanes
  // combined in double: summed in the same loop, GCC shuffled the lanes across iterations.
  // In blocks of 64 elements, each after prefetching four 64-byte lines of the next row, so the
  // prefetches spread over the pass (issued at once, most were dropped).
  for (std::int64_t b = 0; b < valid; b += 64) {
    if (next)
      for (std::int64_t p = b; p < b + 64 && p < n; p += 16) __builtin_prefetch(next + p);
    const std::int64_t end = std::min(b + 64, valid);
    for (std::int64_t k = b; k < end; ++k) y[k] = cpu::fast_exp_nonpositive(x[k] - m);
  }
  std::fill(y + valid, y + n, 0.0f);
  Lanes lanes = {};
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    Lanes v;
    std::memcpy(&v, y + k, sizeof v);
    lanes += v;
  }
  double s = 0.0;
  for (; k < n; ++k) s += y[k];
  for (int l = 0; l < 8; ++l) s += lanes[l];
  if (log) {
    const float lse = static_cast<float>(m + std::log(s));
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] - lse;
  } else {
    const float inv = static_cast<float>(1.0 / s);
    for (std::int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

}  // namespace cpu

namespace {

using cpu::softmax_row;

struct Layout {
  std::int64_t outer = 1, n = 1, inner = 1;
};

Layout layout_of(const Shape& s, int axis) {
  Layout l;
  for (int i = 0; i < axis; ++i) l.outer *= s[i];
  l.n = s[axis];
  for (std::size_t i = axis + 1; i < s.size(); ++i) l.inner *= s[i];
  return l;
}

// attr "axis" (normalised), "log" (0/1). in[0] x dense, out[0] y dense. bf16 and f16 rows are
// widened, computed as f32 rows and rounded (the front end moves their axis last).
template <class T>
void softmax_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const T* x = in[0].data<T>();
  T* y = out[0].data<T>();
  const bool log = a.get_int("log") != 0;
  const Layout l = layout_of(in[0].shape(), static_cast<int>(a.get_int("axis")));
  if constexpr (cpu::kLowPrecision<T>) {
    cpu::parallel_rows(l.outer, l.n, 3.0, [&](std::int64_t begin, std::int64_t end) {
      cpu::RowIn<T> row_in(l.n);
      cpu::RowOut<T> row_out(l.n);
      for (std::int64_t o = begin; o < end; ++o) {
        T* yr = y + o * l.n;
        softmax_row(row_in(x + o * l.n), row_out.at(yr), l.n, log, nullptr, l.n);
        row_out.store(yr);
      }
    });
  } else {
    if constexpr (std::is_same_v<T, float>) {
      if (l.inner == 1) {
        cpu::parallel_rows(l.outer, l.n, 3.0, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t o = begin; o < end; ++o)
            softmax_row(x + o * l.n, y + o * l.n, l.n, log, o + 1 < end ? x + (o + 1) * l.n : nullptr, l.n);
        });
        return;
      }
    }
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t j = 0; j < l.inner; ++j) {
        const std::int64_t base = o * l.n * l.inner + j;
        T m = -std::numeric_limits<T>::infinity();
        for (std::int64_t k = 0; k < l.n; ++k) m = std::fmax(m, x[base + k * l.inner]);
        if (std::isinf(m) && m < 0) m = T(0);  // all -inf row: avoid inf - inf
        // One exp in T per element (x - m <= 0, so no overflow), kept in y; the sum runs in double.
        double s = 0.0;
        for (std::int64_t k = 0; k < l.n; ++k) {
          const T e = std::exp(x[base + k * l.inner] - m);
          y[base + k * l.inner] = e;
          s += e;
        }
        if (log) {
          const double lse = m + std::log(s);
          for (std::int64_t k = 0; k < l.n; ++k)
            y[base + k * l.inner] = static_cast<T>(x[base + k * l.inner] - lse);
        } else {
          const T inv = static_cast<T>(1.0 / s);
          for (std::int64_t k = 0; k < l.n; ++k) y[base + k * l.inner] *= inv;
        }
      }
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("softmax", softmax_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("softmax", softmax_kernel);

// The softmax backward of one dense row, dx = y * (g - sum(g * y)), with the sum in eight double
// lanes so the loop vectorises.
template <class T>
TROUPE_VECTOR_CLONES void softmax_backward_row(const T* __restrict g, const T* __restrict y, T* __restrict dx,
                                               std::int64_t n) {
  double lanes[8] = {};
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += static_cast<double>(g[k + l]) * y[k + l];
  double s = 0.0;
  for (; k < n; ++k) s += static_cast<double>(g[k]) * y[k];
  for (double l : lanes) s += l;
  for (std::int64_t i = 0; i < n; ++i) dx[i] = static_cast<T>(y[i] * (g[i] - s));
}

// The log-softmax backward of one dense row, dx = g - exp(y) * sum(g).
template <class T>
void log_softmax_backward_row(const T* g, const T* y, T* dx, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t k = 0; k < n; ++k) s += g[k];
  for (std::int64_t k = 0; k < n; ++k) dx[k] = static_cast<T>(g[k] - std::exp(static_cast<double>(y[k])) * s);
}

// in[0] grad, in[1] y. softmax: dx = y * (g - sum(g*y)); log: dx = g - exp(y) * sum(g). bf16 and
// f16 rows are widened, as in the forward.
template <class T>
void softmax_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const T* g = in[0].data<T>();
  const T* y = in[1].data<T>();
  T* dx = out[0].data<T>();
  const bool log = a.get_int("log") != 0;
  const Layout l = layout_of(in[0].shape(), static_cast<int>(a.get_int("axis")));
  if (l.inner == 1) {
    using C = cpu::ComputeType<T>;
    cpu::parallel_rows(l.outer, l.n, 3.0, [&](std::int64_t begin, std::int64_t end) {
      cpu::RowIn<T> g_in(l.n), y_in(l.n);
      cpu::RowOut<T> dx_out(l.n);
      for (std::int64_t o = begin; o < end; ++o) {
        const C* gr = g_in(g + o * l.n);
        const C* yr = y_in(y + o * l.n);
        T* dr = dx + o * l.n;
        if (log)
          log_softmax_backward_row(gr, yr, dx_out.at(dr), l.n);
        else
          softmax_backward_row(gr, yr, dx_out.at(dr), l.n);
        dx_out.store(dr);
      }
    });
    return;
  }
  if constexpr (!cpu::kLowPrecision<T>) {
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t j = 0; j < l.inner; ++j) {
        const std::int64_t base = o * l.n * l.inner + j;
        double s = 0.0;
        for (std::int64_t k = 0; k < l.n; ++k) {
          const std::int64_t i = base + k * l.inner;
          s += log ? static_cast<double>(g[i]) : static_cast<double>(g[i]) * y[i];
        }
        for (std::int64_t k = 0; k < l.n; ++k) {
          const std::int64_t i = base + k * l.inner;
          dx[i] = log ? static_cast<T>(g[i] - std::exp(static_cast<double>(y[i])) * s)
                      : static_cast<T>(y[i] * (g[i] - s));
        }
      }
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("softmax_backward", softmax_backward_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("softmax_backward", softmax_backward_kernel);

// The first `valid` scores of a causal row as mul_scalar makes them: scale * x (the rest are the
// mask's -inf, which softmax_row does not read).
template <class C>
TROUPE_VECTOR_CLONES void scaled_prefix(const C* __restrict x, C* __restrict s, std::int64_t valid, C scale) {
  for (std::int64_t j = 0; j < valid; ++j) s[j] = x[j] * scale;
}

// A double row's softmax, as softmax_kernel's f64 loop computes it on a row whose scores from
// `valid` on are -inf (the reference dtype).
void softmax_row(const double* x, double* y, std::int64_t n, bool, const double*, std::int64_t valid) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t k = 0; k < valid; ++k) m = std::fmax(m, x[k]);
  if (std::isinf(m) && m < 0) m = 0.0;
  double s = 0.0;
  for (std::int64_t k = 0; k < n; ++k) s += y[k] = k < valid ? std::exp(x[k] - m) : 0.0;
  const double inv = 1.0 / s;
  for (std::int64_t k = 0; k < n; ++k) y[k] *= inv;
}

// y = softmax(causal_mask(scale * x)) over the last dim of [..., T, T] scores (attr "scale"): the
// chain attention writes around its score product, in one pass over the rows (on the pool of
// cores). bf16 and f16 rows are widened, scaled and masked in f32 and rounded once; with a power
// of two for the scale every dtype gives the chain's bits.
template <class T>
void causal_softmax_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  using C = cpu::ComputeType<T>;
  const std::int64_t n = in[0].shape().back();
  const C scale = static_cast<C>(a.get_double("scale"));
  const T* x = in[0].data<T>();
  T* y = out[0].data<T>();
  cpu::parallel_rows(in[0].numel() / std::max<std::int64_t>(n, 1), n, 4.0, [&](std::int64_t begin, std::int64_t end) {
    cpu::RowIn<T> row_in(n);
    cpu::RowOut<T> row_out(n);
    std::vector<C> scores(static_cast<std::size_t>(n));
    for (std::int64_t r = begin; r < end; ++r) {
      T* yr = y + r * n;
      const std::int64_t valid = r % n + 1;  // query i sees keys 0..i
      scaled_prefix(row_in(x + r * n), scores.data(), valid, scale);
      softmax_row(scores.data(), row_out.at(yr), n, false, nullptr, valid);
      row_out.store(yr);
    }
  });
}
TROUPE_REGISTER_FLOAT_KERNELS("causal_softmax", causal_softmax_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("causal_softmax", causal_softmax_kernel);

// in: dy, y; dx = scale * causal_mask(softmax_backward(dy, y), 0), as the chain's gradient nodes
// compute it, in one pass over the rows.
template <class T>
void causal_softmax_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  using C = cpu::ComputeType<T>;
  const std::int64_t n = in[1].shape().back();
  const C scale = static_cast<C>(a.get_double("scale"));
  const T* g = in[0].data<T>();
  const T* y = in[1].data<T>();
  T* dx = out[0].data<T>();
  cpu::parallel_rows(in[1].numel() / std::max<std::int64_t>(n, 1), n, 4.0, [&](std::int64_t begin, std::int64_t end) {
    cpu::RowIn<T> g_in(n), y_in(n);
    cpu::RowOut<T> dx_out(n);
    for (std::int64_t r = begin; r < end; ++r) {
      T* dr = dx + r * n;
      C* d = dx_out.at(dr);
      softmax_backward_row(g_in(g + r * n), y_in(y + r * n), d, n);
      const std::int64_t i = r % n;
      for (std::int64_t j = 0; j < n; ++j) d[j] = j <= i ? d[j] * scale : C(0);
      dx_out.store(dr);
    }
  });
}
TROUPE_REGISTER_FLOAT_KERNELS("causal_softmax_backward", causal_softmax_backward_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("causal_softmax_backward", causal_softmax_backward_kernel);

}  // namespace
}  // namespace troupe
