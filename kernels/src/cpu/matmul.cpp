// CPU matrix products: f32 and f64 through BLAS on the operands' own strides where BLAS can read
// them, bf16 and f16 through oneDNN's matmul primitive (cpu/dnnl_matmul.hpp).
#include <algorithm>
#include <optional>

#include "cpu/blas.hpp"
#include "cpu/dnnl_common.hpp"
#include "cpu/dnnl_matmul.hpp"
#include "cpu/float_kernels.hpp"
#include "matmul_layout.hpp"

namespace troupe::kernels {

namespace {

// c = op(a) op(b) + beta c for f32 and f64 through BLAS ?gemm, one call per batch entry on the
// strided operands, or one for the whole batch where it folds into M.
template <class T>
void blas_products(Tensor a, Tensor b, bool trans_a, bool trans_b, T beta, Tensor& c) {
  MatrixLayout la = matrix_layout(a), lb = matrix_layout(b);
  if (!la.ok) a = a.contiguous(), la = matrix_layout(a);
  if (!lb.ok) b = b.contiguous(), lb = matrix_layout(b);
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

// True when the batch dims of t (all but the last two) step through memory with one stride, the
// innermost's; size-1 dims are skipped and a broadcast (stride 0) dim of size > 1 never folds.
bool batch_folds(const Tensor& t, std::int64_t& stride) {
  stride = 0;
  std::int64_t expect = -1;
  for (int d = t.dim() - 3; d >= 0; --d) {
    const std::int64_t size = t.shape()[static_cast<std::size_t>(d)], st = t.strides()[static_cast<std::size_t>(d)];
    if (size == 1) continue;
    if (st == 0 || (expect >= 0 && st != expect)) return false;
    if (expect < 0) stride = st;
    expect = st * size;
  }
  return true;
}

// op(x) as oneDNN reads it: [batch, rows, cols] on its own strides, its batch folded into one
// stride (or 1 when it has none, which broadcasts), else a dense copy over the output's batch.
cpu::MatmulOperand operand_of(Tensor t, const Shape& batch, Tensor& keep) {
  const int r = t.dim();
  const std::int64_t rows = t.size(-2), cols = t.size(-1);
  const bool unit = t.strides()[r - 1] == 1 || t.strides()[r - 2] == 1 || rows == 1 || cols == 1;
  const bool broadcast = shape_numel(Shape(t.shape().begin(), t.shape().end() - 2)) == 1;
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  if (!broadcast) t = t.expand(full);  // a dim broadcast within the batch gets stride 0: no fold
  std::int64_t batch_stride = 0;
  if (!unit || (!broadcast && !batch_folds(t, batch_stride))) {
    // A transposed view (k^T of attention's heads) is copied in its stored orientation, so the copy
    // moves whole rows and the product reads it transposed, as it would have read the view.
    const bool transposed = t.strides()[r - 2] == 1 && t.strides()[r - 1] != 1;
    t = transposed ? t.transpose(-1, -2).contiguous().transpose(-1, -2) : t.contiguous();
    batch_stride = rows * cols;
  }
  keep = t;
  cpu::MatmulOperand o;
  o.data = t.raw_data();
  o.type = cpu::dnnl_type(t.dtype());
  o.dims[0] = broadcast ? 1 : shape_numel(batch);
  o.dims[1] = rows;
  o.dims[2] = cols;
  o.strides[0] = broadcast ? rows * cols : batch_stride;
  o.strides[1] = t.strides()[r - 2];
  o.strides[2] = t.strides()[r - 1];
  return o;
}

// Low-precision products (bf16 or f16 operands, f32 accumulation) on oneDNN's matmul, written as
// f32 or in the operands' type (the output's dtype says which), with a bias of the output's dtype
// for matmul_bias. A Linear layer's x[..., k] @ w[k, n] runs as one product over all rows.
void matmul_low(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& c = out[0];
  const Shape batch = batch_of(c);
  const std::int64_t m = c.size(-2), n = c.size(-1);
  const Tensor a = attrs.get_int("trans_a") ? in[0].transpose(-1, -2) : in[0];
  const Tensor b = attrs.get_int("trans_b") ? in[1].transpose(-1, -2) : in[1];
  Tensor kept_a, kept_b;
  cpu::MatmulOperand ao = operand_of(a, batch, kept_a), bo = operand_of(b, batch, kept_b);
  cpu::MatmulOperand co;
  co.data = c.raw_data();
  co.type = cpu::dnnl_type(c.dtype());
  co.dims[0] = shape_numel(batch);
  co.dims[1] = m;
  co.dims[2] = n;
  co.strides[0] = m * n;
  co.strides[1] = n;
  if (bo.dims[0] == 1 && ao.dims[0] > 1 && ao.strides[0] == m * ao.strides[1] && ao.strides[2] == 1) {
    ao.dims[1] = co.dims[1] = ao.dims[0] * m;  // the weights are shared: fold the batch into the rows
    ao.dims[0] = co.dims[0] = 1;
    ao.strides[0] = ao.dims[1] * ao.strides[1];
    co.strides[0] = co.dims[1] * n;
  }
  if (c.numel() == 0) return;
  if (ao.dims[2] == 0) {
    Tensor zeros = in.size() > 2 ? in[2].expand(c.shape()) : Tensor::zeros(c.shape(), c.dtype());
    c.copy_from(zeros);
    return;
  }
  std::optional<cpu::MatmulOperand> bias;
  Tensor kept_bias;
  if (in.size() > 2) {
    kept_bias = in[2].contiguous();
    bias.emplace();
    bias->data = kept_bias.raw_data();
    bias->type = cpu::dnnl_type(kept_bias.dtype());
    bias->dims[2] = n;
    bias->dims[1] = 1;
    bias->strides[0] = bias->strides[1] = n;
  }
  cpu::dnnl_matmul(ao, bo, bias ? &*bias : nullptr, co);
}

}  // namespace

TROUPE_REGISTER_FLOAT_KERNELS("matmul", matmul_blas);
TROUPE_REGISTER_FLOAT_KERNELS("matmul_bias", matmul_bias_blas);
TROUPE_REGISTER_KERNEL("matmul", cpu, bf16, matmul_low);
TROUPE_REGISTER_KERNEL("matmul", cpu, f16, matmul_low);
TROUPE_REGISTER_KERNEL("matmul_bias", cpu, bf16, matmul_low);
TROUPE_REGISTER_KERNEL("matmul_bias", cpu, f16, matmul_low);

}  // namespace troupe::kernels
