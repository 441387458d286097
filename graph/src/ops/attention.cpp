// The attention family: fused causal attention with its backward op, and the causal mask of
// attention scores.
#include <limits>

#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/graph/dropout.hpp"
#include "troupe/kernels/attention.hpp"
#include "troupe/kernels/select.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

// causal_attention(q, k, v) -> (y, lse): q, k, v of one floating dtype and one shape [..., T, D];
// lse is f32 for bf16 and f16 q.
std::vector<ValueInfo> infer_causal_attention(const InferContext& c) {
  expect_arity(c, 3, 3);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  expect_same_dtype(c, 0, 2);
  const SymShape& q = c.inputs[0].shape;
  if (q.size() < 2) shape_error(c, "q, k and v must be [..., T, D]");
  if (c.inputs[1].shape != q || c.inputs[2].shape != q) shape_error(c, "q, k and v must have one shape");
  return {c.inputs[0], ValueInfo{accumulation_dtype(c.inputs[0].dtype), SymShape(q.begin(), q.end() - 1)}};
}
// The node's dropout (attrs dropout, site, shard) at the run's position, for q's shape.
kernels::AttentionDropout dropout_of(const ComputeContext& c, const Shape& q) {
  if (!c.attrs.has("dropout")) return {};
  const std::vector<std::int64_t>& shard = c.attrs.get_ints("shard");
  return {c.attrs.get_double("dropout"), static_cast<std::uint64_t>(c.attrs.get_int("site")), c.random,
          shard[0] * q[0], q.size() == 4 ? shard[1] * q[1] : 0};
}
std::vector<Tensor> compute_causal_attention(const std::vector<Tensor>& in, const ComputeContext& c) {
  auto r = kernels::causal_attention(in[0], in[1], in[2], c.attrs.get_double("scale"), dropout_of(c, in[0].shape()));
  return {r.y, r.lse};
}
// Four operations per element of q and key: q k^T and p v, two each.
double attention_cost(const CostContext& c) {
  const Shape& q = c.inputs[0];
  return 4 * static_cast<double>(shape_numel(q)) * static_cast<double>(q[q.size() - 2]);
}
// Twice the forward's (q is input 1 of the backward).
double attention_backward_cost(const CostContext& c) {
  const Shape& q = c.inputs[1];
  return 8 * static_cast<double>(shape_numel(q)) * static_cast<double>(q[q.size() - 2]);
}
std::vector<Var> grad_causal_attention(const GradContext& c) {
  auto g = apply("causal_attention_backward",
                 {c.grad_output(0), c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[0], c.outputs[1]}, c.attrs);
  return {g[0], g[1], g[2]};
}
// (dy, q, k, v, y, lse) -> (dq, dk, dv).
std::vector<ValueInfo> infer_causal_attention_backward(const InferContext& c) {
  expect_arity(c, 6, 6);
  if (c.inputs[0].shape != c.inputs[1].shape) shape_error(c, "the gradient must have the shape of q");
  return {c.inputs[1], c.inputs[1], c.inputs[1]};
}
std::vector<Tensor> compute_causal_attention_backward(const std::vector<Tensor>& in, const ComputeContext& c) {
  auto g = kernels::causal_attention_backward(in[0], in[1], in[2], in[3], in[4], in[5], c.attrs.get_double("scale"),
                                              dropout_of(c, in[1].shape()));
  return {g.dq, g.dk, g.dv};
}
// Sharding of causal_attention (q, k, v): batch and head dims; each head's [T, D] stays whole.
std::vector<ShardSignature> shard_attention(const ShardContext& c) { return shard_rows(c, 2, 3); }
}  // namespace
// softmax(causal_mask(scale * q k^T)) v in one kernel (kernels::causal_attention) that never holds
// the T x T scores; y's log-sum-exp per row (output 1) is saved for causal_attention_backward.
Var causal_attention(const Var& q, const Var& k, const Var& v, double scale) {
  return apply("causal_attention", {q, k, v}, Attrs().set("scale", scale))[0];
}
Var causal_attention(const Var& q, const Var& k, const Var& v, double scale, double dropout, const std::string& name) {
  if (dropout == 0) return causal_attention(q, k, v, scale);
  const Attrs attrs = Attrs()
                          .set("scale", scale)
                          .set("dropout", dropout)
                          .set("site", static_cast<std::int64_t>(dropout_site(name)))
                          .set("shard", std::vector<std::int64_t>{0, 0});
  return apply("causal_attention", {q, k, v}, attrs, {}, name)[0];
}
TROUPE_DEFINE_OP({.name = "causal_attention", .infer = infer_causal_attention, .cost = attention_cost, .sharding = shard_attention, .compute = compute_causal_attention,
                  .grad = grad_causal_attention, .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "causal_attention_backward", .infer = infer_causal_attention_backward, .cost = attention_backward_cost,
                  .compute = compute_causal_attention_backward});

namespace {
std::vector<Tensor> compute_causal_mask(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::causal_mask(in[0], c.attrs.get_double("fill"))};
}
std::vector<ValueInfo> infer_causal_mask(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  const SymShape& s = c.inputs[0].shape;
  if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2])
    shape_error(c, "the last two dims must be square (queries x keys)");
  return one(c.inputs[0].dtype, s);
}
// Sharding of causal_mask: each [queries, keys] square stays whole; batch and head dims split.
std::vector<ShardSignature> shard_causal_mask(const ShardContext& c) { return shard_rows(c, 2, 1); }
}  // namespace
// Keeps x[..., i, j] for j <= i and fills above the diagonal (attribute "fill"): -inf for scores,
// 0 for their gradient.
Var causal_mask(const Var& x) {
  return apply1("causal_mask", {x}, Attrs().set("fill", -std::numeric_limits<double>::infinity()));
}
// compute: kernels::causal_mask, which makes the input dense for the kernel.
TROUPE_DEFINE_OP({.name = "causal_mask", .infer = infer_causal_mask, .sharding = shard_causal_mask, .compute = compute_causal_mask,
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {apply1("causal_mask", {c.grad_output(0)}, Attrs().set("fill", 0.0))};
                  }, .precision = Precision::keeps_f32});

}  // namespace troupe::graph
