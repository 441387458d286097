// CPU layer normalisation over the last dimension. Inputs are made dense by the front end and
// seen as [rows, D]. f64 rows accumulate in double; f32 rows in float vector lanes whose sums are
// combined in double, as PyTorch's CPU kernels compute in float; bf16 and f16 rows are widened
// and computed as f32 rows, with f32 statistics.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"
#include "cpu/low_rows.hpp"
#include "cpu/parallel.hpp"
#include "layernorm_y.hpp"

namespace troupe {
namespace {

// sum of f(x[i]) over a double row in eight lanes (lane l takes the elements i + l), so the loop
// vectorises without reassociating one running sum.
template <class F>
inline __attribute__((always_inline)) double lane_sum(const double* __restrict x, std::int64_t d, F f) {
  double lanes[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= d; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += f(x[i + l]);
  double s = 0.0;
  for (; i < d; ++i) s += f(x[i]);
  for (double l : lanes) s += l;
  return s;
}

template <class T>
TROUPE_VECTOR_CLONES void add_row(const T* __restrict a, const T* __restrict b, T* __restrict s, std::int64_t d) {
  for (std::int64_t i = 0; i < d; ++i) s[i] = a[i] + b[i];
}

// A double row: mean and variance in two passes, then y.
TROUPE_VECTOR_CLONES void layernorm_row(const double* __restrict p, const double* __restrict g, const double* __restrict b,
                                        double* __restrict y, std::int64_t d, double eps, double* mean, double* rstd_out) {
  const double m = lane_sum(p, d, [](double v) { return v; }) / static_cast<double>(d);
  const double v = lane_sum(p, d, [m](double e) { return (e - m) * (e - m); }) / static_cast<double>(d);
  const double rstd = 1.0 / std::sqrt(v + eps);
  for (std::int64_t i = 0; i < d; ++i) y[i] = (p[i] - m) * rstd * g[i] + b[i];
  *mean = m;
  *rstd_out = rstd;
}

// Eight floats, one AVX2 vector (two SSE ones in the baseline clone): GCC's vector extension, as
// in softmax, since with plain lane arrays GCC vectorised across rows of lanes and shuffled. Loaded
// by memcpy in place: a function returning one would change the ABI between the clones.
using Floats8 = float __attribute__((vector_size(32)));

// The sum of x[i], or with `squares` of (x[i] - centre)^2, over a float row in eight float lanes
// combined in double: each lane adds d/8 elements, so its rounding stays near sqrt(d/8) ulp.
inline __attribute__((always_inline)) double lane_sum_f32(const float* __restrict x, std::int64_t d, bool squares,
                                                          float centre) {
  Floats8 lanes = {};
  std::int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    Floats8 v;
    std::memcpy(&v, x + i, sizeof v);
    if (squares) v = (v - centre) * (v - centre);
    lanes += v;
  }
  double s = 0.0;
  for (; i < d; ++i) s += squares ? (x[i] - centre) * (x[i] - centre) : x[i];
  for (int l = 0; l < 8; ++l) s += lanes[l];
  return s;
}

// A float row: the statistics in float lanes (combined in double) and y in float, as PyTorch's CPU
// kernel computes it; within a few ulp of the double form.
TROUPE_VECTOR_CLONES void layernorm_row(const float* __restrict p, const float* __restrict g, const float* __restrict b,
                                        float* __restrict y, std::int64_t d, double eps, float* mean, float* rstd_out) {
  const double m = lane_sum_f32(p, d, false, 0.0f) / static_cast<double>(d);
  const float mf = static_cast<float>(m);
  const double v = lane_sum_f32(p, d, true, mf) / static_cast<double>(d);
  const double rstd = 1.0 / std::sqrt(v + eps);
  const float rf = static_cast<float>(rstd);
  for (std::int64_t i = 0; i < d; ++i) y[i] = (p[i] - mf) * rf * g[i] + b[i];
  *mean = mf;
  *rstd_out = rf;
}

// in: x, gamma, beta; out: y, mean, rstd (f32 for bf16 and f16 x, whose rows, gamma and beta are
// widened to f32 rows and y rounded once); attr "eps".
template <class T>
void layernorm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  using C = cpu::ComputeType<T>;
  const double eps = a.get_double("eps");
  const std::int64_t d = in[0].shape().back();
  const std::int64_t rows = d > 0 ? in[0].numel() / d : out[1].numel();
  cpu::RowIn<T> gamma_in(d), beta_in(d);
  const T* x = in[0].data<T>();
  const C* g = gamma_in(in[1].data<T>());
  const C* b = beta_in(in[2].data<T>());
  C* mu = out[1].data<C>();
  C* rs = out[2].data<C>();
  with_y_type<T>(out[0].dtype(), [&](auto y_type) {
    using Y = decltype(y_type);
    Y* y = out[0].data<Y>();
    cpu::parallel_rows(rows, d, 2.0, [&](std::int64_t begin, std::int64_t end) {
      cpu::RowIn<T> x_in(d);
      cpu::RowOut<Y> y_out(d);
      for (std::int64_t r = begin; r < end; ++r) {
        Y* yr = y + r * d;
        layernorm_row(x_in(x + r * d), g, b, y_out.at(yr), d, eps, mu + r, rs + r);
        y_out.store(yr);
      }
    });
  });
}
TROUPE_REGISTER_FLOAT_KERNELS("layernorm", layernorm_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("layernorm", layernorm_kernel);

// in: a, b (a's last dims, repeated over its leading ones), gamma, beta; out: s = a + b, y (in a's
// dtype or, for f32 rows, bf16 or f16), mean, rstd; attr "eps". Each row of the sum is formed and rounded to T as the add kernel forms it and
// normalised while it is still in cache, so the results are add-then-layernorm's bits without a
// second pass.
template <class T>
void add_layernorm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  using C = cpu::ComputeType<T>;
  const double eps = a.get_double("eps");
  const std::int64_t d = in[0].shape().back();
  const std::int64_t rows = in[0].numel() / d, r_rows = in[1].numel() / d;
  cpu::RowIn<T> gamma_in(d), beta_in(d);
  const T* x = in[0].data<T>();
  const T* r = in[1].data<T>();
  const C* g = gamma_in(in[2].data<T>());
  const C* b = beta_in(in[3].data<T>());
  T* s = out[0].data<T>();
  C* mu = out[2].data<C>();
  C* rs = out[3].data<C>();
  with_y_type<T>(out[1].dtype(), [&](auto y_type) {
    using Y = decltype(y_type);
    Y* y = out[1].data<Y>();
    cpu::parallel_rows(rows, d, 3.0, [&](std::int64_t begin, std::int64_t end) {
      cpu::RowIn<T> a_in(d), b_in(d), s_in(d);
      cpu::RowOut<T> s_out(d);
      cpu::RowOut<Y> y_out(d);
      for (std::int64_t row = begin; row < end; ++row) {
        T* sr = s + row * d;
        Y* yr = y + row * d;
        add_row(a_in(x + row * d), b_in(r + (row % r_rows) * d), s_out.at(sr), d);
        s_out.store(sr);
        layernorm_row(s_in(sr), g, b, y_out.at(yr), d, eps, mu + row, rs + row);
        y_out.store(yr);
      }
    });
  });
}
TROUPE_REGISTER_FLOAT_KERNELS("add_layernorm", add_layernorm_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("add_layernorm", add_layernorm_kernel);

// A double row of the backward: adds the row's share of dgamma and dbeta and writes dx. s1 and s2
// (the means of dxhat and dxhat * xhat) go in eight lanes so the loop vectorises.
TROUPE_VECTOR_CLONES void layernorm_backward_row(const double* __restrict dy, const double* __restrict x,
                                                 const double* __restrict g, double m, double rstd, std::int64_t d,
                                                 const double* __restrict more, double* __restrict dx,
                                                 double* __restrict dgs, double* __restrict dbs) {
  double l1[8] = {}, l2[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= d; i += 8)
    for (int l = 0; l < 8; ++l) {
      const double xh = (x[i + l] - m) * rstd, gy = dy[i + l], dxh = gy * g[i + l];
      l1[l] += dxh;
      l2[l] += dxh * xh;
    }
  double s1 = 0.0, s2 = 0.0;
  for (; i < d; ++i) {
    const double xh = (x[i] - m) * rstd, dxh = dy[i] * g[i];
    s1 += dxh;
    s2 += dxh * xh;
  }
  for (int l = 0; l < 8; ++l) {
    s1 += l1[l];
    s2 += l2[l];
  }
  s1 /= static_cast<double>(d);
  s2 /= static_cast<double>(d);
  for (std::int64_t k = 0; k < d; ++k) {
    const double xh = (x[k] - m) * rstd, gy = dy[k];
    dgs[k] += gy * xh;
    dbs[k] += gy;
    dx[k] = rstd * (gy * g[k] - s1 - xh * s2);
  }
  // A loop of its own, so that dx is rounded before the sum, as a separate add would round it (in
  // one expression the compiler may contract both into an FMA).
  if (more)
    for (std::int64_t k = 0; k < d; ++k) dx[k] = more[k] + dx[k];
}

// A float row of the backward: s1 and s2 in float lanes (combined in double), dx in float, and the
// row's share of dgamma and dbeta added to float sums that the kernel folds into double ones every
// kFoldRows rows, so they never add more than that many rows in float.
TROUPE_VECTOR_CLONES void layernorm_backward_row(const float* __restrict dy, const float* __restrict x,
                                                 const float* __restrict g, float m, float rstd, std::int64_t d,
                                                 const float* __restrict more, float* __restrict dx,
                                                 float* __restrict dgs, float* __restrict dbs) {
  Floats8 l1 = {}, l2 = {};
  std::int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    Floats8 xv, dyv, gv;
    std::memcpy(&xv, x + i, sizeof xv);
    std::memcpy(&dyv, dy + i, sizeof dyv);
    std::memcpy(&gv, g + i, sizeof gv);
    const Floats8 xh = (xv - m) * rstd, dxh = dyv * gv;
    l1 += dxh;
    l2 += dxh * xh;
  }
  double s1 = 0.0, s2 = 0.0;
  for (; i < d; ++i) {
    const float xh = (x[i] - m) * rstd, dxh = dy[i] * g[i];
    s1 += dxh;
    s2 += static_cast<double>(dxh) * xh;
  }
  for (int l = 0; l < 8; ++l) {
    s1 += l1[l];
    s2 += l2[l];
  }
  const float a = static_cast<float>(s1 / static_cast<double>(d)), c = static_cast<float>(s2 / static_cast<double>(d));
  for (std::int64_t k = 0; k < d; ++k) {
    const float xh = (x[k] - m) * rstd, gy = dy[k];
    dgs[k] += gy * xh;
    dbs[k] += gy;
    dx[k] = rstd * (gy * g[k] - a - xh * c);
  }
  if (more)  // rounded as a separate add would round it, as in the double row
    for (std::int64_t k = 0; k < d; ++k) dx[k] = more[k] + dx[k];
}

// in: dy, x, gamma, mean, rstd and optionally another gradient of x to add to dx in the same pass
// (a residual's, rounded as a separate add would round it); out: dx, dgamma, dbeta. bf16 and f16
// rows are widened as in the forward (mean and rstd are f32).
template <class T>
void layernorm_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  using C = cpu::ComputeType<T>;
  const std::int64_t d = in[1].shape().back();
  const std::int64_t rows = in[3].numel();
  cpu::RowIn<T> gamma_in(d);
  const T* dy = in[0].data<T>();
  const T* x = in[1].data<T>();
  const C* g = gamma_in(in[2].data<T>());
  const C* mu = in[3].data<C>();
  const C* rs = in[4].data<C>();
  const T* more = in.size() > 5 ? in[5].data<T>() : nullptr;
  T* dx = out[0].data<T>();
  T* dg = out[1].data<T>();
  T* db = out[2].data<T>();
  // Rows [begin, end) adding their shares of dgamma and dbeta into dgs and dbs.
  const auto rows_of = [&](std::int64_t begin, std::int64_t end, C* dgs, C* dbs) {
    cpu::RowIn<T> dy_in(d), x_in(d), more_in(d);
    cpu::RowOut<T> dx_out(d);
    for (std::int64_t r = begin; r < end; ++r) {
      T* dxr = dx + r * d;
      layernorm_backward_row(dy_in(dy + r * d), x_in(x + r * d), g, mu[r], rs[r], d,
                             more ? more_in(more + r * d) : nullptr, dx_out.at(dxr), dgs, dbs);
      dx_out.store(dxr);
    }
  };
  const auto du = static_cast<std::size_t>(d);
  std::vector<double> dgs(du, 0.0), dbs(du, 0.0);
  if constexpr (std::is_same_v<C, float>) {
    // Each group of kFoldRows rows sums its shares in float on whichever core runs it; the groups'
    // sums are then folded into double in row order, so any number of cores gives the same bits.
    // Up to kBatchFolds groups at a time, so the float sums held stay bounded whatever the rows.
    constexpr std::int64_t kFoldRows = 32, kBatchFolds = 64;
    const std::int64_t folds = (rows + kFoldRows - 1) / kFoldRows;
    std::vector<float> fg(static_cast<std::size_t>(std::min(folds, kBatchFolds)) * du), fb(fg.size());
    for (std::int64_t first = 0; first < folds; first += kBatchFolds) {
      const std::int64_t batch = std::min(kBatchFolds, folds - first);
      std::fill(fg.begin(), fg.end(), 0.0f);
      std::fill(fb.begin(), fb.end(), 0.0f);
      cpu::parallel_tiles(batch, 3.0 * static_cast<double>(kFoldRows * d), [&](std::int64_t f) {
        const auto at = static_cast<std::size_t>(f) * du;
        const std::int64_t r0 = (first + f) * kFoldRows;
        rows_of(r0, std::min(rows, r0 + kFoldRows), fg.data() + at, fb.data() + at);
      });
      for (std::size_t at = 0; at < static_cast<std::size_t>(batch) * du; at += du)
        for (std::size_t i = 0; i < du; ++i) {
          dgs[i] += fg[at + i];
          dbs[i] += fb[at + i];
        }
    }
  } else {
    rows_of(0, rows, dgs.data(), dbs.data());  // the f64 reference: one pass, in row order
  }
  for (std::int64_t i = 0; i < d; ++i) {
    dg[i] = from_double<T>(dgs[static_cast<std::size_t>(i)]);
    db[i] = from_double<T>(dbs[static_cast<std::size_t>(i)]);
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("layernorm_backward", layernorm_backward_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("layernorm_backward", layernorm_backward_kernel);

}  // namespace
}  // namespace troupe
