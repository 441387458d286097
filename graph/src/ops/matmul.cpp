// The matmul op: batched matrix products with broadcasting and optional transposes.
#include "op_helpers.hpp"
#include "troupe/kernels/matmul.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

std::vector<ValueInfo> infer_matmul(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  const SymShape &a = c.inputs[0].shape, &b = c.inputs[1].shape;
  if (a.size() < 2 || b.size() < 2) shape_error(c, "both operands need at least 2 dims ([..., m, k] @ [..., k, n])");
  const bool ta = get_flag(c.attrs, "trans_a"), tb = get_flag(c.attrs, "trans_b");
  const SymDim m = a[a.size() - (ta ? 1 : 2)], ka = a[a.size() - (ta ? 2 : 1)];
  const SymDim kb = b[b.size() - (tb ? 1 : 2)], n = b[b.size() - (tb ? 2 : 1)];
  if (ka != kb)
    shape_error(c, "inner dimensions differ (" + ka.str() + " vs " + kb.str() + "); expected a[..., m, k] @ b[..., k, n]" +
                       (ta || tb ? " after the requested transposes" : ""));
  SymShape out = broadcast(SymShape(a.begin(), a.end() - 2), SymShape(b.begin(), b.end() - 2), "matmul (batch dims)");
  out.push_back(m);
  out.push_back(n);
  return one(c.inputs[0].dtype, out);
}

std::vector<Tensor> compute_matmul(const std::vector<Tensor>& in, const ComputeContext& c) {
  const Tensor &a = in[0], &b = in[1];
  const bool ta = get_flag(c.attrs, "trans_a"), tb = get_flag(c.attrs, "trans_b");
  // x[..., k] @ w[k, n] is one GEMM over all rows, not one per batch index.
  if (!ta && b.dim() == 2 && a.dim() > 2 && a.is_contiguous()) {
    const std::int64_t k = a.shape().back();
    Tensor y = kernels::matmul(a.view({a.numel() / k, k}), b, false, tb);
    return {y.view(c.output_shapes[0])};
  }
  return {kernels::matmul(a, b, ta, tb)};
}

// The gradient of a 2-D weight shared across batch dims: one GEMM over the flattened rows.
Var flat_weight_grad(const Var& rows, const Var& dy, bool rows_first) {
  const Var r = reshape(rows, {-1, rows.size(-1)});
  const Var d = reshape(dy, {-1, dy.size(-1)});
  return rows_first ? matmul(r, d, true, false) : matmul(d, r, true, false);
}

std::vector<Var> grad_matmul(const GradContext& c) {
  const Var dy = c.grad_output(0);
  const Var &a = c.inputs[0], &b = c.inputs[1];
  const bool ta = get_flag(c.attrs, "trans_a"), tb = get_flag(c.attrs, "trans_b");
  Var da, db;
  if (c.needs_grad[0]) {
    if (!ta) da = matmul(dy, b, false, !tb);
    else da = tb ? matmul(b, dy, true, true) : matmul(b, dy, false, true);
    da = unbroadcast(da, a);
  }
  if (c.needs_grad[1]) {
    if (!ta && b.dim() == 2 && a.dim() > 2) db = flat_weight_grad(a, dy, !tb);
    else if (!tb) db = ta ? matmul(a, dy) : matmul(a, dy, true, false);
    else db = ta ? matmul(dy, a, true, true) : matmul(dy, a, true, false);
    db = unbroadcast(db, b);
  }
  return {da, db};
}

}  // namespace

Var matmul(const Var& a, const Var& b, bool trans_a, bool trans_b) {
  return apply1("matmul", {a, b},
                Attrs().set("trans_a", std::int64_t{trans_a}).set("trans_b", std::int64_t{trans_b}));
}
// compute: kernels::matmul, with x[..., k] @ w[k, n] flattened to one GEMM.
TROUPE_DEFINE_OP({.name = "matmul", .infer = infer_matmul, .compute = compute_matmul, .grad = grad_matmul});

}  // namespace troupe::graph
