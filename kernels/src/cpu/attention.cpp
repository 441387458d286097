// CPU kernels of fused causal attention, y = softmax(mask(scale q k^T)) v, forward and backward,
// that never hold the T x T scores: each query row walks its keys in tiles of kTile with an online
// softmax (a running max and sum, rescaled when the max grows), as FlashAttention does. The
// forward saves each row's log-sum-exp, from which the backward recomputes the probabilities a
// tile at a time. K and V are transposed once per (batch, head) so every inner loop runs over
// contiguous memory and vectorises. Inputs are dense [N, T, D] (the front end makes them so).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"

namespace troupe::kernels {

namespace {

constexpr std::int64_t kTile = 64;

template <class T>
T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return cpu::fast_exp(x);
  else return std::exp(x);
}

// out[d][t] = in[t][d] for one [T, D] matrix.
template <class T>
void transpose_into(const T* in, T* out, std::int64_t t_len, std::int64_t d_len) {
  for (std::int64_t t = 0; t < t_len; ++t)
    for (std::int64_t d = 0; d < d_len; ++d) out[d * t_len + t] = in[t * d_len + d];
}

// s[c] = scale * (row . mt[:, j0 + c]) for c < n: one query (or gradient) row against a tile of
// the transposed keys (or values) mt [D, T].
template <class T>
TROUPE_VECTOR_CLONES void row_times_tile(const T* row, const T* mt, std::int64_t t_len, std::int64_t d_len,
                                         std::int64_t j0, std::int64_t n, T scale, T* s) {
  for (std::int64_t c = 0; c < n; ++c) s[c] = 0;
  for (std::int64_t d = 0; d < d_len; ++d) {
    const T a = row[d];
    const T* m = mt + d * t_len + j0;
    for (std::int64_t c = 0; c < n; ++c) s[c] += a * m[c];
  }
  for (std::int64_t c = 0; c < n; ++c) s[c] *= scale;
}

// y += a * x over n elements.
template <class T>
TROUPE_VECTOR_CLONES void axpy(T a, const T* x, T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// One (batch, head): rows i = 0..T-1, keys j <= i.
template <class T>
void forward_head(const T* q, const T* k, const T* v, T* y, T* lse, std::int64_t t_len, std::int64_t d_len, T scale,
                  std::vector<T>& kt, std::vector<T>& s, std::vector<T>& acc) {
  transpose_into(k, kt.data(), t_len, d_len);
  for (std::int64_t i = 0; i < t_len; ++i) {
    T m = -std::numeric_limits<T>::infinity(), l = 0;
    std::fill(acc.begin(), acc.end(), T(0));
    for (std::int64_t j0 = 0; j0 <= i; j0 += kTile) {
      const std::int64_t n = std::min(kTile, i + 1 - j0);
      row_times_tile(q + i * d_len, kt.data(), t_len, d_len, j0, n, scale, s.data());
      T tile_max = s[0];
      for (std::int64_t c = 1; c < n; ++c) tile_max = s[c] > tile_max ? s[c] : tile_max;
      const T m_new = tile_max > m ? tile_max : m;
      const T correction = exp_of(m - m_new);  // 0 on the first tile (m = -inf)
      l *= correction;
      for (std::int64_t d = 0; d < d_len; ++d) acc[d] *= correction;
      for (std::int64_t c = 0; c < n; ++c) {
        const T p = exp_of(s[c] - m_new);
        l += p;
        axpy(p, v + (j0 + c) * d_len, acc.data(), d_len);
      }
      m = m_new;
    }
    for (std::int64_t d = 0; d < d_len; ++d) y[i * d_len + d] = acc[d] / l;
    lse[i] = m + std::log(l);
  }
}

template <class T>
void attention_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& shape = in[0].shape();  // [N, T, D]
  const std::int64_t heads = shape[0], t_len = shape[1], d_len = shape[2];
  const T scale = static_cast<T>(attrs.get_double("scale"));
  std::vector<T> kt(static_cast<std::size_t>(t_len * d_len)), s(kTile), acc(static_cast<std::size_t>(d_len));
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t off = h * t_len * d_len;
    forward_head(in[0].data<T>() + off, in[1].data<T>() + off, in[2].data<T>() + off, out[0].data<T>() + off,
                 out[1].data<T>() + h * t_len, t_len, d_len, scale, kt, s, acc);
  }
}

// What the backward of one (batch, head) reads and writes.
template <class T>
struct HeadGrads {
  const T *dy, *q, *k, *v, *y, *lse;
  T *dq, *dk, *dv;
};

// FlashAttention-2's backward for one (batch, head): with p = exp(s - lse) recomputed per tile,
// dv_j += p dy_i, ds = p (dy_i . v_j - dy_i . y_i), dq_i += scale ds k_j, dk_j += scale ds q_i.
template <class T>
void backward_head(const HeadGrads<T>& g, std::int64_t t_len, std::int64_t d_len, T scale, std::vector<T>& kt,
                   std::vector<T>& vt, std::vector<T>& s, std::vector<T>& dp) {
  transpose_into(g.k, kt.data(), t_len, d_len);
  transpose_into(g.v, vt.data(), t_len, d_len);
  for (std::int64_t i = 0; i < t_len; ++i) {
    const T* dyi = g.dy + i * d_len;
    const T* qi = g.q + i * d_len;
    T delta = 0;
    for (std::int64_t d = 0; d < d_len; ++d) delta += dyi[d] * g.y[i * d_len + d];
    for (std::int64_t j0 = 0; j0 <= i; j0 += kTile) {
      const std::int64_t n = std::min(kTile, i + 1 - j0);
      row_times_tile(qi, kt.data(), t_len, d_len, j0, n, scale, s.data());
      row_times_tile(dyi, vt.data(), t_len, d_len, j0, n, T(1), dp.data());
      for (std::int64_t c = 0; c < n; ++c) {
        const std::int64_t j = j0 + c;
        const T p = exp_of(s[c] - g.lse[i]);
        axpy(p, dyi, g.dv + j * d_len, d_len);
        const T ds = scale * p * (dp[c] - delta);
        axpy(ds, g.k + j * d_len, g.dq + i * d_len, d_len);
        axpy(ds, qi, g.dk + j * d_len, d_len);
      }
    }
  }
}

template <class T>
void attention_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& shape = in[1].shape();  // q: [N, T, D]
  const std::int64_t heads = shape[0], t_len = shape[1], d_len = shape[2];
  const T scale = static_cast<T>(attrs.get_double("scale"));
  for (Tensor& o : out) std::fill(o.data<T>(), o.data<T>() + o.numel(), T(0));
  std::vector<T> kt(static_cast<std::size_t>(t_len * d_len)), vt(kt.size()), s(kTile), dp(kTile);
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t off = h * t_len * d_len;
    const auto at = [&](std::size_t k) { return in[k].data<T>() + off; };
    const HeadGrads<T> g{at(0), at(1), at(2), at(3), at(4), in[5].data<T>() + h * t_len,
                         out[0].data<T>() + off, out[1].data<T>() + off, out[2].data<T>() + off};
    backward_head(g, t_len, d_len, scale, kt, vt, s, dp);
  }
}

TROUPE_REGISTER_FLOAT_KERNELS("causal_attention", attention_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("causal_attention_backward", attention_backward_kernel);

}  // namespace

}  // namespace troupe::kernels
