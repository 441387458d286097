// The causal attention front ends: q, k, v (and the backward's tensors) checked for one shape and
// dtype, made dense as [N, T, D], outputs allocated, dispatch.
#include "troupe/kernels/attention.hpp"

#include "float_checks.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {
namespace {

// [..., T, D] as [N, T, D], dense.
Tensor as_heads(const Tensor& t) {
  const Shape& s = t.shape();
  const std::int64_t rows = s[s.size() - 2], d = s.back();
  return t.contiguous().view({t.numel() / (rows * d), rows, d});
}

// q, k, v: one float dtype, one shape [..., T, D] with T, D >= 1.
void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_float(op, "q", q, true);
  check_float_like(op, "k", k, "q", q, true);
  check_float_like(op, "v", v, "q", q, true);
  TROUPE_CHECK(q.dim() >= 2 && q.shape().back() > 0 && q.shape()[q.dim() - 2] > 0, shape_mismatch, op,
               ": q must be [..., T, D] with T, D >= 1, got ", shape_str(q.shape()));
  TROUPE_CHECK(k.shape() == q.shape() && v.shape() == q.shape(), shape_mismatch, op, ": q, k and v must have one shape, got ",
               shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
}

Shape rows_of(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// The kernel's attributes: the scale and, with dropout, where the heads of [N, T, D] sit.
Attrs attention_attrs(const char* op, const Shape& q, double scale, const AttentionDropout& d) {
  Attrs a;
  a.set("scale", scale);
  if (d.p == 0) return a;
  TROUPE_CHECK(q.size() == 3 || q.size() == 4, shape_mismatch, op, ": dropout takes q [B, H, T, D] or [N, T, D], got ",
               shape_str(q));
  (void)DropoutStream(d.at, d.site, d.p);  // checks p
  return a.set("dropout", d.p)
      .set("site", static_cast<std::int64_t>(d.site))
      .set("seed", static_cast<std::int64_t>(d.at.seed))
      .set("step", static_cast<std::int64_t>(d.at.step))
      .set("first_row", d.at.first_row + d.row_offset)
      .set("first_column", d.column_offset)
      .set("columns", q.size() == 4 ? q[1] : 0);  // 0: [N, T, D], whose probabilities' dim 1 is the query
}

}  // namespace

AttentionResult causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                 const AttentionDropout& dropout) {
  check_qkv("causal_attention", q, k, v);
  const Tensor qd = as_heads(q);
  std::vector<Tensor> outs{Tensor::empty(qd.shape(), q.dtype(), q.device()),
                           Tensor::empty({qd.shape()[0], qd.shape()[1]}, accumulation_dtype(q.dtype()), q.device())};
  dispatch("causal_attention", {qd, as_heads(k), as_heads(v)}, outs,
           attention_attrs("causal_attention", q.shape(), scale, dropout));
  return {outs[0].view(q.shape()), outs[1].view(rows_of(q.shape()))};
}

AttentionGrads causal_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& y, const Tensor& lse, double scale,
                                         const AttentionDropout& dropout) {
  const char* op = "causal_attention_backward";
  check_qkv(op, q, k, v);
  check_float_like(op, "grad", grad, "q", q, true);
  check_float_like(op, "y", y, "q", q, true);
  TROUPE_CHECK(lse.defined() && lse.dtype() == accumulation_dtype(q.dtype()), dtype_mismatch, op, ": lse ", lse.str(),
               " must be ", dtype_name(accumulation_dtype(q.dtype())), " for q ", q.str(), " (what causal_attention returns)");
  TROUPE_CHECK(grad.shape() == q.shape() && y.shape() == q.shape() && lse.shape() == rows_of(q.shape()), shape_mismatch, op,
               ": grad and y must have q's shape ", shape_str(q.shape()), " and lse ", shape_str(rows_of(q.shape())),
               ", got ", shape_str(grad.shape()), ", ", shape_str(y.shape()), ", ", shape_str(lse.shape()));
  const Tensor qd = as_heads(q);
  std::vector<Tensor> outs;
  for (int i = 0; i < 3; ++i) outs.push_back(Tensor::empty(qd.shape(), q.dtype(), q.device()));
  const Tensor lsed = lse.contiguous().view({qd.shape()[0], qd.shape()[1]});
  dispatch(op, {as_heads(grad), qd, as_heads(k), as_heads(v), as_heads(y), lsed}, outs,
           attention_attrs(op, q.shape(), scale, dropout));
  return {outs[0].view(q.shape()), outs[1].view(q.shape()), outs[2].view(q.shape())};
}

}  // namespace troupe::kernels
