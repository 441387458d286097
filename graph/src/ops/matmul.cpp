// The matmul op: batched matrix products with broadcasting and optional transposes.
#include "op_helpers.hpp"
#include "shard_rules.hpp"
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
  return one(product_dtype(c), out);
}

// (a, b, bias): matmul's shape, and a bias over its last dim.
std::vector<ValueInfo> infer_matmul_bias(const InferContext& c) {
  expect_arity(c, 3, 3);
  const std::vector<ValueInfo> operands{c.inputs[0], c.inputs[1]};
  std::vector<ValueInfo> out = infer_matmul(InferContext{c.op, operands, c.attrs, c.target});
  const SymShape& y = out[0].shape;
  if (c.inputs[2].shape != SymShape{y.back()}) shape_error(c, "the bias must have shape [" + y.back().str() + "], the product's last dim");
  if (c.inputs[2].dtype != out[0].dtype)
    shape_error(c, std::string("the bias must have the product's dtype, ") + dtype_name(out[0].dtype));
  return out;
}

// The gradient of a 2-D weight shared across batch dims: one GEMM over the flattened rows.
Var flat_weight_grad(const Var& rows, const Var& dy, bool rows_first) {
  const Var r = reshape(rows, {-1, rows.size(-1)});
  const Var d = reshape(dy, {-1, dy.size(-1)});
  return rows_first ? matmul(r, d, true, false) : matmul(d, r, true, false);
}

// The operands' gradients are products in the operands' dtype (bf16 under mixed precision, whatever
// the product was written in), so dy joins them in that dtype: one cast, which every product shares.
std::vector<Var> grad_matmul(const GradContext& c) {
  const Var &a = c.inputs[0], &b = c.inputs[1];
  const Var dy = cast(c.grad_output(0), a.dtype());
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

// Sharding (Megatron's splits): rows of a (m) give rows of the product, columns of b (n) its
// columns, and the inner dim k split in both gives partial sums; batch dims split alike (an operand
// broadcast along one stays whole); a partial sum passes through either operand, the product being
// linear in each.
std::vector<ShardSignature> shard_matmul(const ShardContext& c) {
  const SymShape &a = c.inputs[0].shape, &b = c.inputs[1].shape;
  const int ra = static_cast<int>(a.size()), rb = static_cast<int>(b.size()), r = static_cast<int>(c.outputs[0].shape.size());
  const bool ta = get_flag(c.attrs, "trans_a"), tb = get_flag(c.attrs, "trans_b");
  const int m = ra - (ta ? 1 : 2), ka = ra - (ta ? 2 : 1), kb = rb - (tb ? 1 : 2), n = rb - (tb ? 2 : 1);
  const auto S = [](int d, int blocks = 1) { return Placement::split(d, blocks); };
  const Placement B = Placement::broadcast(), P = Placement::partial_sum();
  std::vector<ShardSignature> out;
  const auto whole = [](const SymShape& s, int d) { return d < 0 || (s[static_cast<std::size_t>(d)].is_static() && s[static_cast<std::size_t>(d)].size() == 1); };
  for (int d = 0; d < r - 2; ++d) {
    const int da = d - (r - ra), db = d - (r - rb);
    if (whole(a, da) && whole(b, db)) continue;
    out.push_back({{whole(a, da) ? B : S(da), whole(b, db) ? B : S(db)}, {S(d)}});
  }
  out.push_back({{S(m), B}, {S(r - 2)}});
  out.push_back({{B, S(n)}, {S(r - 1)}});
  out.push_back({{S(ka), S(kb)}, {P}});
  out.push_back({{P, B}, {P}});
  out.push_back({{B, P}, {P}});
  // Blocked splits (Placement::blocks: qkv rows grouped by head) pass through m, n and k alike.
  const Placement &ca = c.current[0], &cb = c.current[1];
  const auto blocked = [](const Placement& p, int d) { return p.kind == Placement::Kind::split && p.dim == d && p.blocks > 1; };
  if (blocked(ca, m)) out.push_back({{ca, B}, {S(r - 2, ca.blocks)}});
  if (blocked(cb, n)) out.push_back({{B, cb}, {S(r - 1, cb.blocks)}});
  if (blocked(ca, ka) || blocked(cb, kb)) {
    const int k = blocked(ca, ka) ? ca.blocks : cb.blocks;
    out.push_back({{S(ka, k), S(kb, k)}, {P}});
  }
  return out;
}

}  // namespace

namespace {
Attrs transposes(bool trans_a, bool trans_b) {
  return Attrs().set("trans_a", std::int64_t{trans_a}).set("trans_b", std::int64_t{trans_b});
}

Attrs product_attrs(bool trans_a, bool trans_b, std::optional<DType> out) {
  Attrs attrs = transposes(trans_a, trans_b);
  if (out) attrs.set("out_dtype", static_cast<std::int64_t>(*out));
  return attrs;
}

// 2 m n k: two operations per output element and step of the shared dim (a's last, or its second
// last when transposed).
double product_cost(const CostContext& c) {
  const Shape& a = c.inputs[0];
  return 2 * static_cast<double>(shape_numel(c.outputs[0])) * static_cast<double>(a[a.size() - (get_flag(c.attrs, "trans_a") ? 2 : 1)]);
}
}  // namespace

Var matmul(const Var& a, const Var& b, bool trans_a, bool trans_b, std::optional<DType> out_dtype) {
  return apply1("matmul", {a, b}, product_attrs(trans_a, trans_b, out_dtype));
}
// compute: kernels::matmul (one GEMM for x[..., k] @ w[k, n] over all rows).
TROUPE_DEFINE_OP({.name = "matmul", .infer = infer_matmul, .cost = product_cost, .sharding = shard_matmul, .kernel = "matmul", .grad = grad_matmul,
                  .autocast_inputs = {0, 1}});

Var matmul_bias(const Var& a, const Var& b, const Var& bias, bool trans_a, bool trans_b, std::optional<DType> out_dtype) {
  return apply1("matmul_bias", {a, b, bias}, product_attrs(trans_a, trans_b, out_dtype));
}
// The gradients are the unfused matmul's and add's: the same nodes, so the same bits.
TROUPE_DEFINE_OP({.name = "matmul_bias", .infer = infer_matmul_bias, .cost = product_cost, .kernel = "matmul_bias",
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    std::vector<Var> g = grad_matmul(c);
                    g.push_back(c.needs_grad[2] ? sum_to(c.grad_output(0), c.inputs[2]) : Var());
                    return g;
                  },
                  .autocast_inputs = {0, 1}});

}  // namespace troupe::graph
