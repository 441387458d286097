// CPU matrix products: f32 and f64 through BLAS on the operands' own strides where BLAS can read
// them, bf16 through oneDNN.
#include <algorithm>

#include <dnnl.hpp>

#include "cpu/blas.hpp"
#include "cpu/float_kernels.hpp"

namespace troupe::kernels {

namespace {

// How BLAS sees the last two dims of an operand: the stored matrix, transposed or not, and its
// leading dimension. `ok` is false when the layout needs a copy first.
struct BlasLayout {
  bool ok = false;
  bool trans = false;
  std::int64_t ld = 0;
};

BlasLayout blas_layout(const Tensor& t) {
  const int r = t.dim();
  const std::int64_t rows = t.shape()[r - 2], cols = t.shape()[r - 1];
  const std::int64_t s0 = t.strides()[r - 2], s1 = t.strides()[r - 1];
  if ((s1 == 1 || cols == 1) && s0 >= std::max<std::int64_t>(cols, 1)) return {true, false, s0};
  if ((s0 == 1 || rows == 1) && s1 >= std::max<std::int64_t>(rows, 1)) return {true, true, s1};
  return {};
}

// The batch dims of t: all but the last two.
Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// The batch offsets (in elements) of operand `t` for each batch index of `batch`, broadcasting.
std::vector<std::int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  Shape tb = batch_of(t);
  Strides ts(t.strides().begin(), t.strides().end() - 2);
  const std::size_t lead = batch.size() - tb.size();
  const std::int64_t count = shape_numel(batch);
  std::vector<std::int64_t> offs(static_cast<std::size_t>(count), 0);
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t rem = i, off = 0;
    for (std::size_t d = batch.size(); d-- > 0;) {
      const std::int64_t idx = rem % batch[d];
      rem /= batch[d];
      if (d >= lead && tb[d - lead] != 1) off += idx * ts[d - lead];
    }
    offs[static_cast<std::size_t>(i)] = off;
  }
  return offs;
}

// c = op(a) op(b) + beta c for f32 and f64 through BLAS ?gemm, one call per batch entry on the
// strided operands, or one for the whole batch where it folds into M.
template <class T>
void blas_products(Tensor a, Tensor b, bool trans_a, bool trans_b, T beta, Tensor& c) {
  BlasLayout la = blas_layout(a), lb = blas_layout(b);
  if (!la.ok) a = a.contiguous(), la = blas_layout(a);
  if (!lb.ok) b = b.contiguous(), lb = blas_layout(b);
  const bool ta = la.trans != trans_a, tb = lb.trans != trans_b;
  const std::int64_t m = c.size(-2), n = c.size(-1);
  const std::int64_t k = trans_a ? a.size(-2) : a.size(-1);
  T* cp = c.data<T>();
  if (k == 0) {
    if (beta == T(0)) std::fill_n(cp, c.numel(), T(0));
    return;
  }
  const Shape batch = batch_of(c);
  const auto ao = batch_offsets(a, batch), bo = batch_offsets(b, batch);
  const T* ap = a.data<T>();
  const T* bp = b.data<T>();
  // One b for every batch entry and a's rows evenly spaced across the entries (x @ W of a Linear
  // layer over [batch, tokens, features]): one GEMM with the batch folded into M, which BLAS
  // blocks and threads better than many short ones.
  const bool one_b = std::all_of(bo.begin(), bo.end(), [](std::int64_t o) { return o == 0; });
  bool rows_even = !ta && ao.size() > 1;
  for (std::size_t i = 0; rows_even && i < ao.size(); ++i) rows_even = ao[i] == static_cast<std::int64_t>(i) * m * la.ld;
  if (one_b && rows_even) {
    cpu::gemm(CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m * static_cast<std::int64_t>(ao.size())),
              static_cast<int>(n), static_cast<int>(k), T(1), ap, static_cast<int>(la.ld), bp, static_cast<int>(lb.ld),
              beta, cp, static_cast<int>(n));
    return;
  }
  for (std::size_t i = 0; i < ao.size(); ++i)
    cpu::gemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), T(1), ap + ao[i], static_cast<int>(la.ld), bp + bo[i], static_cast<int>(lb.ld), beta,
              cp + static_cast<std::int64_t>(i) * m * n, static_cast<int>(n));
}

template <class T>
void matmul_blas(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  blas_products(in[0], in[1], attrs.get_int("trans_a") != 0, attrs.get_int("trans_b") != 0, T(0), out[0]);
}

// The bias epilogue (a Linear layer): every row of c starts as the bias and the GEMM accumulates
// onto it (beta = 1), so the sum is never a second pass over the output.
template <class T>
void matmul_bias_blas(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& c = out[0];
  const Tensor bias = in[2].contiguous();
  const std::int64_t n = c.size(-1), rows = n > 0 ? c.numel() / n : 0;
  const T* bp = bias.data<T>();
  T* cp = c.data<T>();
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(bp, n, cp + r * n);
  blas_products(in[0], in[1], attrs.get_int("trans_a") != 0, attrs.get_int("trans_b") != 0, T(1), c);
}

// bf16 x bf16 -> bf16 with f32 accumulation on oneDNN (AVX-512 BF16 / AMX where the CPU has them).
void matmul_bf16(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& c = out[0];
  const Shape batch = batch_of(c);
  const std::int64_t bsz = shape_numel(batch), m = c.size(-2), n = c.size(-1);
  auto dense3 = [&](Tensor t, bool trans, std::int64_t rows, std::int64_t cols) {
    if (trans) t = t.transpose(-1, -2);
    Shape full = batch;
    full.push_back(rows);
    full.push_back(cols);
    return t.expand(full).contiguous().reshape({bsz, rows, cols});
  };
  const std::int64_t k = attrs.get_int("trans_a") ? in[0].size(-2) : in[0].size(-1);
  Tensor a = dense3(in[0], attrs.get_int("trans_a") != 0, m, k);
  Tensor b = dense3(in[1], attrs.get_int("trans_b") != 0, k, n);
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::memory::desc ad({bsz, m, k}, dt::bf16, tag::abc), bd({bsz, k, n}, dt::bf16, tag::abc),
      cd({bsz, m, n}, dt::bf16, tag::abc);
  dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), engine));
  dnnl::stream stream(engine);
  dnnl::memory am(ad, engine, a.raw_data()), bm(bd, engine, b.raw_data()), cm(cd, engine, c.raw_data());
  prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
}

}  // namespace

TROUPE_REGISTER_FLOAT_KERNELS("matmul", matmul_blas);
TROUPE_REGISTER_FLOAT_KERNELS("matmul_bias", matmul_bias_blas);
TROUPE_REGISTER_KERNEL("matmul", cpu, bf16, matmul_bf16);

}  // namespace troupe::kernels
