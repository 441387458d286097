// CPU kernels of fused causal attention, y = softmax(mask(scale q k^T)) v, forward and backward,
// as FlashAttention does it: queries and keys in tiles of kTile rows, the scores of one tile pair
// at a time (kTile x kTile, never T x T), an online softmax per query row (a running max and sum,
// the partial output rescaled when the max grows), and each row's log-sum-exp saved for the
// backward, which recomputes the probabilities tile by tile. The tile products are GEMMs (OpenBLAS,
// cpu/blas.hpp); tiles above the diagonal are skipped and the diagonal tile is masked. Inputs are
// dense [N, T, D] (the front end makes them so). bf16 and f16 heads are widened to f32 one at a
// time, so the low-precision kernels read and write their own dtype and compute as the f32 ones.
// With dropout the probabilities of each tile are multiplied by dropout's factors (0 or 1 / (1 - p))
// after the softmax's sums, before the product with v; the backward recomputes the same factors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "troupe/kernels/dropout.hpp"

#include "cpu/blas.hpp"
#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"
#include "cpu/low_rows.hpp"
#include "cpu/parallel.hpp"

namespace troupe::kernels {

namespace {

constexpr std::int64_t kTile = 64;

template <class T>
T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return cpu::fast_exp(x);
  else return std::exp(x);
}

// One tile pair: query rows [i0, i0 + rows) against keys [j0, j0 + cols).
struct TilePair {
  std::int64_t i0, rows, j0, cols;
  // Key c of query row r is above the diagonal (masked).
  bool masked(std::int64_t r, std::int64_t c) const { return j0 + c > i0 + r; }
};

// s = scale * a_rows b_cols^T for a [*, D] row block and a [*, D] key block (leading dim D).
template <class T>
void scores(const TilePair& t, const T* a, const T* b, std::int64_t d_len, T scale, T* s) {
  cpu::gemm(CblasNoTrans, CblasTrans, static_cast<int>(t.rows), static_cast<int>(t.cols), static_cast<int>(d_len),
            scale, a + t.i0 * d_len, static_cast<int>(d_len), b + t.j0 * d_len, static_cast<int>(d_len), T(0), s,
            static_cast<int>(kTile));
}

// Row r of the tile's scores becomes exp(s - m[r]) in place (0 where masked); returns nothing, the
// caller sums what it needs. Vectorises: the mask is a select.
template <class T>
TROUPE_VECTOR_CLONES void exp_rows(const TilePair& t, T* s, const T* m) {
  for (std::int64_t r = 0; r < t.rows; ++r) {
    T* row = s + r * kTile;
    const std::int64_t visible = std::min(t.cols, t.i0 + r - t.j0 + 1);  // keys j <= i
    for (std::int64_t c = 0; c < t.cols; ++c) {
      const T e = exp_of(row[c] - m[r]);
      row[c] = c < visible ? e : T(0);
    }
  }
}

// Dropout on one head's probabilities [T, T], drawn as dropout_mask draws for the probabilities
// tensor: [B, H, T, T] (the head's row b and column h, each query row's keys inner) or [N, T, T]
// (row n, the query as the column, its keys inner). Null stream: no dropout.
struct HeadDropout {
  const DropoutStream* stream = nullptr;
  std::int64_t row = 0, column = 0, t_len = 0;
  bool query_is_column = false;  // [N, T, T]
  // The tile's factors into z (kTile columns per row), through `f` (kTile floats of scratch).
  template <class T>
  void factors(const TilePair& t, T* z, float* f) const {
    for (std::int64_t r = 0; r < t.rows; ++r) {
      if (query_is_column) stream->fill(row, t.i0 + r, t.j0, t.cols, f);
      else stream->fill(row, column, (t.i0 + r) * t_len + t.j0, t.cols, f);
      for (std::int64_t c = 0; c < t.cols; ++c) z[r * kTile + c] = static_cast<T>(f[c]);
    }
  }
};

// The heads' dropout, from the kernel's attributes (attention_attrs in the front end).
struct AttentionDrops {
  explicit AttentionDrops(const Attrs& a) {
    if (!a.has("dropout")) return;
    stream.emplace(RandomPosition{static_cast<std::uint64_t>(a.get_int("seed")), static_cast<std::uint64_t>(a.get_int("step")), 0},
                   static_cast<std::uint64_t>(a.get_int("site")), a.get_double("dropout"));
    first_row = a.get_int("first_row");
    first_column = a.get_int("first_column");
    columns = a.get_int("columns");
  }
  // Head n of [N, T, D] ([B * H, T, D] when columns = H; columns 0: q was [N, T, D]).
  HeadDropout head(std::int64_t n, std::int64_t t_len) const {
    if (!stream) return {};
    if (columns == 0) return {&*stream, first_row + n, 0, t_len, true};
    return {&*stream, first_row + n / columns, first_column + n % columns, t_len, false};
  }
  std::optional<DropoutStream> stream;
  std::int64_t first_row = 0, first_column = 0, columns = 1;
};

// The online softmax's step for one tile pair: new row maxima, the rescale of the running sums l
// and outputs acc [rows, D], then acc += p v_tile (p times dropout's factors z, with dropout).
template <class T>
void forward_tile(const TilePair& t, const T* v, std::int64_t d_len, T* s, T* m, T* l, T* acc, T* m_new,
                  const HeadDropout& drop, T* z, float* f) {
  for (std::int64_t r = 0; r < t.rows; ++r) {
    T mx = m[r];
    for (std::int64_t c = 0; c < t.cols; ++c)
      if (!t.masked(r, c)) mx = s[r * kTile + c] > mx ? s[r * kTile + c] : mx;
    m_new[r] = mx;
  }
  exp_rows(t, s, m_new);
  for (std::int64_t r = 0; r < t.rows; ++r) {
    const T correction = exp_of(m[r] - m_new[r]);  // 0 on the first tile (m = -inf)
    T sum = 0;
    for (std::int64_t c = 0; c < t.cols; ++c) sum += s[r * kTile + c];
    l[r] = l[r] * correction + sum;
    for (std::int64_t d = 0; d < d_len; ++d) acc[r * d_len + d] *= correction;
    m[r] = m_new[r];
  }
  if (drop.stream) {
    drop.factors(t, z, f);
    for (std::int64_t r = 0; r < t.rows; ++r)
      for (std::int64_t c = 0; c < t.cols; ++c) s[r * kTile + c] *= z[r * kTile + c];
  }
  cpu::gemm(CblasNoTrans, CblasNoTrans, static_cast<int>(t.rows), static_cast<int>(d_len), static_cast<int>(t.cols), T(1),
            s, static_cast<int>(kTile), v + t.j0 * d_len, static_cast<int>(d_len), T(1), acc, static_cast<int>(d_len));
}

// One head's forward work in about nanoseconds: its causal half of two T x T x D products.
double head_work(std::int64_t t_len, std::int64_t d_len) {
  return static_cast<double>(t_len) * static_cast<double>(t_len) * static_cast<double>(d_len) * 0.25;
}

// Scratch of one head's computation, reused across its tiles.
template <class T>
struct Scratch {
  explicit Scratch(std::int64_t d_len)
      : s(kTile * kTile), ds(kTile * kTile), z(kTile * kTile), pz(kTile * kTile), acc(kTile * d_len), m(kTile), l(kTile),
        m_new(kTile), f(kTile) {}
  std::vector<T> s, ds, z, pz, acc, m, l, m_new;  // z, pz: dropout's factors and the dropped probabilities
  std::vector<float> f;                            // one row of factors as drawn
};

template <class T>
void forward_head(const T* q, const T* k, const T* v, T* y, T* lse, std::int64_t t_len, std::int64_t d_len, T scale,
                  const HeadDropout& drop, Scratch<T>& w) {
  for (std::int64_t i0 = 0; i0 < t_len; i0 += kTile) {
    const std::int64_t rows = std::min(kTile, t_len - i0);
    std::fill(w.m.begin(), w.m.end(), -std::numeric_limits<T>::infinity());
    std::fill(w.l.begin(), w.l.end(), T(0));
    std::fill(w.acc.begin(), w.acc.end(), T(0));
    for (std::int64_t j0 = 0; j0 < i0 + rows; j0 += kTile) {
      const TilePair t{i0, rows, j0, std::min(kTile, t_len - j0)};
      scores(t, q, k, d_len, scale, w.s.data());
      forward_tile(t, v, d_len, w.s.data(), w.m.data(), w.l.data(), w.acc.data(), w.m_new.data(), drop, w.z.data(), w.f.data());
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      const T inv = T(1) / w.l[r];
      for (std::int64_t d = 0; d < d_len; ++d) y[(i0 + r) * d_len + d] = w.acc[r * d_len + d] * inv;
      lse[i0 + r] = w.m[r] + std::log(w.l[r]);
    }
  }
}

// in: q, k, v [N, T, D]; out: y [N, T, D], lse [N, T] (f32 for bf16 and f16, whose heads are widened
// to f32, computed by the f32 code and y rounded once); attr "scale".
template <class T>
void attention_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using C = cpu::ComputeType<T>;
  const Shape& shape = in[0].shape();  // [N, T, D]
  const std::int64_t heads = shape[0], t_len = shape[1], d_len = shape[2], size = t_len * d_len;
  const C scale = static_cast<C>(attrs.get_double("scale"));
  const AttentionDrops drops(attrs);
  // Heads on the idle cores too, each with its own scratch.
  cpu::parallel_tiles(heads, head_work(t_len, d_len), [&](std::int64_t h) {
    Scratch<C> w(d_len);
    cpu::RowIn<T> q_in(size), k_in(size), v_in(size);
    cpu::RowOut<T> y_out(size);
    const std::int64_t off = h * size;
    T* y = out[0].data<T>() + off;
    forward_head(q_in(in[0].data<T>() + off), k_in(in[1].data<T>() + off), v_in(in[2].data<T>() + off), y_out.at(y),
                 out[1].data<C>() + h * t_len, t_len, d_len, scale, drops.head(h, t_len), w);
    y_out.store(y);
  });
}

// What the backward of one (batch, head) reads and writes.
template <class T>
struct HeadGrads {
  const T *dy, *q, *k, *v, *y, *lse;
  T *dq, *dk, *dv;
};

// ds = scale * p * (dp - delta[row]) in place of dp, row by row.
template <class T>
TROUPE_VECTOR_CLONES void score_grads(const TilePair& t, const T* p, T* dp, const T* delta, T scale) {
  for (std::int64_t r = 0; r < t.rows; ++r)
    for (std::int64_t c = 0; c < t.cols; ++c)
      dp[r * kTile + c] = scale * p[r * kTile + c] * (dp[r * kTile + c] - delta[r]);
}

// FlashAttention-2's backward for one tile pair, with p = exp(s - lse) recomputed:
// dv_j += p^T dy_i, dp = dy_i v_j^T, ds = scale p (dp - delta), dq_i += ds k_j, dk_j += ds^T q_i.
// With dropout's factors z: dv_j += (p z)^T dy_i and dp = (dy_i v_j^T) z; delta = dy . y stays
// the row sum of p dp, as y is the dropped probabilities' product with v.
template <class T>
void backward_tile(const TilePair& t, const HeadGrads<T>& g, std::int64_t d_len, T scale, const T* delta,
                   const HeadDropout& drop, Scratch<T>& w) {
  const int rows = static_cast<int>(t.rows), cols = static_cast<int>(t.cols), dl = static_cast<int>(d_len);
  const int tile = static_cast<int>(kTile);
  scores(t, g.q, g.k, d_len, scale, w.s.data());
  exp_rows(t, w.s.data(), g.lse + t.i0);
  const T* dyi = g.dy + t.i0 * d_len;
  const T* dropped = w.s.data();
  if (drop.stream) {
    drop.factors(t, w.z.data(), w.f.data());
    for (std::int64_t r = 0; r < t.rows; ++r)
      for (std::int64_t c = 0; c < t.cols; ++c) w.pz[r * kTile + c] = w.s[r * kTile + c] * w.z[r * kTile + c];
    dropped = w.pz.data();
  }
  cpu::gemm(CblasTrans, CblasNoTrans, cols, dl, rows, T(1), dropped, tile, dyi, dl, T(1), g.dv + t.j0 * d_len, dl);
  cpu::gemm(CblasNoTrans, CblasTrans, rows, cols, dl, T(1), dyi, dl, g.v + t.j0 * d_len, dl, T(0), w.ds.data(), tile);
  if (drop.stream)
    for (std::int64_t r = 0; r < t.rows; ++r)
      for (std::int64_t c = 0; c < t.cols; ++c) w.ds[r * kTile + c] *= w.z[r * kTile + c];
  score_grads(t, w.s.data(), w.ds.data(), delta + t.i0, scale);
  cpu::gemm(CblasNoTrans, CblasNoTrans, rows, dl, cols, T(1), w.ds.data(), tile, g.k + t.j0 * d_len, dl, T(1),
            g.dq + t.i0 * d_len, dl);
  cpu::gemm(CblasTrans, CblasNoTrans, cols, dl, rows, T(1), w.ds.data(), tile, g.q + t.i0 * d_len, dl, T(1),
            g.dk + t.j0 * d_len, dl);
}

template <class T>
void backward_head(const HeadGrads<T>& g, std::int64_t t_len, std::int64_t d_len, T scale, std::vector<T>& delta,
                   const HeadDropout& drop, Scratch<T>& w) {
  for (std::int64_t i = 0; i < t_len; ++i) {  // delta_i = dy_i . y_i
    T sum = 0;
    for (std::int64_t d = 0; d < d_len; ++d) sum += g.dy[i * d_len + d] * g.y[i * d_len + d];
    delta[static_cast<std::size_t>(i)] = sum;
  }
  for (std::int64_t i0 = 0; i0 < t_len; i0 += kTile)
    for (std::int64_t j0 = 0; j0 <= i0; j0 += kTile)
      backward_tile(TilePair{i0, std::min(kTile, t_len - i0), j0, std::min(kTile, t_len - j0)}, g, d_len, scale,
                    delta.data(), drop, w);
}

// in: dy, q, k, v, y [N, T, D], lse [N, T]; out: dq, dk, dv. bf16 and f16 heads are widened as in
// the forward; attr "scale".
template <class T>
void attention_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using C = cpu::ComputeType<T>;
  const Shape& shape = in[1].shape();  // q: [N, T, D]
  const std::int64_t heads = shape[0], t_len = shape[1], d_len = shape[2], size = t_len * d_len;
  const C scale = static_cast<C>(attrs.get_double("scale"));
  const AttentionDrops drops(attrs);
  cpu::parallel_tiles(heads, 2.5 * head_work(t_len, d_len), [&](std::int64_t h) {
    Scratch<C> w(d_len);
    std::vector<C> delta(static_cast<std::size_t>(t_len));
    std::vector<cpu::RowIn<T>> ins(5, cpu::RowIn<T>(size));
    std::vector<cpu::RowOut<T>> outs(3, cpu::RowOut<T>(size));
    const std::int64_t off = h * size;
    const auto at = [&](std::size_t k) { return ins[k](in[k].data<T>() + off); };
    C* grads[3];
    for (std::size_t k = 0; k < 3; ++k) {
      grads[k] = outs[k].at(out[k].data<T>() + off);
      std::fill(grads[k], grads[k] + size, C(0));
    }
    const HeadGrads<C> g{at(0), at(1), at(2), at(3), at(4), in[5].data<C>() + h * t_len, grads[0], grads[1], grads[2]};
    backward_head(g, t_len, d_len, scale, delta, drops.head(h, t_len), w);
    for (std::size_t k = 0; k < 3; ++k) outs[k].store(out[k].data<T>() + off);
  });
}

TROUPE_REGISTER_FLOAT_KERNELS("causal_attention", attention_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("causal_attention_backward", attention_backward_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("causal_attention", attention_kernel);
TROUPE_REGISTER_LOW_PRECISION_KERNELS("causal_attention_backward", attention_backward_kernel);

}  // namespace

}  // namespace troupe::kernels
