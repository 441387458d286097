// The layer-norm family: layer_norm with its backward op, and add_layer_norm (a residual add and
// the layer norm of its sum in one pass).
#include <algorithm>
#include <optional>

#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/layernorm.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

// The dtype y is written in: x's, or attribute "y_dtype" (bf16 or f16 for f32 x: level 3's
// norm-cast fusion folds the cast before a product into the norm).
DType y_dtype(const InferContext& c, DType x) {
  if (!c.attrs.has("y_dtype")) return x;
  const auto y = static_cast<DType>(c.attrs.get_int("y_dtype"));
  if (y != x && (x != DType::f32 || !is_low_precision(y)))
    shape_error(c, std::string("y can be written as ") + dtype_name(y) + " only from f32 rows, not " + dtype_name(x));
  return y;
}
std::optional<DType> y_dtype(const ComputeContext& c) {
  if (!c.attrs.has("y_dtype")) return std::nullopt;
  return static_cast<DType>(c.attrs.get_int("y_dtype"));
}

// layer_norm(x, gamma, beta) -> (y, mean, rstd); mean and rstd (f32 for bf16 and f16 x) are saved
// for the backward.
std::vector<ValueInfo> infer_layer_norm(const InferContext& c) {
  expect_arity(c, 3, 3);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  expect_same_dtype(c, 0, 2);
  const SymShape& x = c.inputs[0].shape;
  if (x.empty()) shape_error(c, "x needs at least one dim");
  const SymShape d{x.back()};
  if (c.inputs[1].shape != d || c.inputs[2].shape != d)
    shape_error(c, "gamma and beta must have shape " + sym_shape_str(d) + " (the last dim of x)");
  const SymShape rows(x.begin(), x.end() - 1);
  const DType stats = accumulation_dtype(c.inputs[0].dtype);
  return {ValueInfo{y_dtype(c, c.inputs[0].dtype), x}, ValueInfo{stats, rows}, ValueInfo{stats, rows}};
}
std::vector<Tensor> compute_layer_norm(const std::vector<Tensor>& in, const ComputeContext& c) {
  auto r = kernels::layernorm(in[0], in[1], in[2], c.attrs.get_double("eps"), y_dtype(c));
  return {r.y, r.mean, r.rstd};
}
// y's gradient comes in y's dtype; the backward takes it in x's, as a cast after the norm would.
std::vector<Var> grad_layer_norm(const GradContext& c) {
  auto g = apply("layer_norm_backward", {cast(c.grad_output(0), c.inputs[0].dtype()), c.inputs[0], c.inputs[1],
                                         c.outputs[1], c.outputs[2]});
  return {g[0], g[1], g[2]};
}
// (dy, x, gamma, mean, rstd[, more]) -> (dx [+ more], dgamma, dbeta): `more`, another gradient of
// x (a residual stream's), is added to dx in the same pass.
std::vector<ValueInfo> infer_layer_norm_backward(const InferContext& c) {
  expect_arity(c, 5, 6);
  if (c.inputs[0].shape != c.inputs[1].shape) shape_error(c, "the gradient must have the shape of x");
  if (c.inputs.size() == 6 && c.inputs[5].shape != c.inputs[1].shape)
    shape_error(c, "the gradient to add must have the shape of x");
  return {c.inputs[1], c.inputs[2], c.inputs[2]};
}
std::vector<Tensor> compute_layer_norm_backward(const std::vector<Tensor>& in, const ComputeContext&) {
  auto g = kernels::layernorm_backward(in[0], in[1], in[2], in[3], in[4], in.size() > 5 ? in[5] : Tensor());
  return {g.dx, g.dgamma, g.dbeta};
}
// Sharding of layer_norm (x, gamma, beta): rows of x, the weights whole.
std::vector<ShardSignature> shard_layer_norm(const ShardContext& c) { return shard_rows(c, 1, 1); }
// Sharding of layer_norm_backward (dy, x, gamma, mean, rstd[, more]): rows split alike give dx
// (and `more`) split alike and partial sums of dgamma and dbeta (each device sums its rows).
std::vector<ShardSignature> shard_layer_norm_backward(const ShardContext& c) {
  const std::size_t leading = c.inputs[1].shape.size() - 1;
  std::vector<ShardSignature> out;
  for (std::size_t d = 0; d < leading; ++d) {
    const Placement split = Placement::split(static_cast<int>(d));
    ShardSignature s{std::vector<Placement>(c.inputs.size(), split), {split, Placement::partial_sum(), Placement::partial_sum()}};
    s.inputs[2] = Placement::broadcast();  // gamma
    out.push_back(s);
  }
  return out;
}
}  // namespace
// layer_norm(x, gamma, beta) -> (y, mean, rstd): compute kernels::layernorm; mean and rstd are
// saved for layer_norm_backward (kernels::layernorm_backward), which gives dx, dgamma, dbeta.
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  return apply("layer_norm", {x, gamma, beta}, Attrs().set("eps", eps))[0];
}
TROUPE_DEFINE_OP({.name = "layer_norm", .infer = infer_layer_norm, .sharding = shard_layer_norm, .compute = compute_layer_norm, .grad = grad_layer_norm,
                  .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "layer_norm_backward", .infer = infer_layer_norm_backward, .sharding = shard_layer_norm_backward,
                  .compute = compute_layer_norm_backward});

namespace {
// add_layer_norm(a, b, gamma, beta) -> (s = a + b, y, mean, rstd): a residual add and the layer
// norm of its sum in one pass (level 3 fuses them); b may repeat over a's leading dims.
std::vector<ValueInfo> infer_add_layer_norm(const InferContext& c) {
  expect_arity(c, 4, 4);
  expect_floating(c, 0);
  for (std::size_t i = 1; i < 4; ++i) expect_same_dtype(c, 0, i);
  const SymShape &a = c.inputs[0].shape, &b = c.inputs[1].shape;
  if (a.empty() || b.empty() || b.size() > a.size() || !std::equal(b.begin(), b.end(), a.end() - static_cast<std::ptrdiff_t>(b.size())))
    shape_error(c, "b must be made of the last dims of a");
  const SymShape d{a.back()};
  if (c.inputs[2].shape != d || c.inputs[3].shape != d)
    shape_error(c, "gamma and beta must have shape " + sym_shape_str(d) + " (the last dim of a)");
  const SymShape rows(a.begin(), a.end() - 1);
  const DType t = c.inputs[0].dtype, stats = accumulation_dtype(t);
  return {ValueInfo{t, a}, ValueInfo{y_dtype(c, t), a}, ValueInfo{stats, rows}, ValueInfo{stats, rows}};
}
std::vector<Tensor> compute_add_layer_norm(const std::vector<Tensor>& in, const ComputeContext& c) {
  auto r = kernels::add_layernorm(in[0], in[1], in[2], in[3], c.attrs.get_double("eps"), y_dtype(c));
  return {r.sum, r.y, r.mean, r.rstd};
}
// The sum's gradient is what reaches s from its other readers plus the layer norm's dx, formed by
// one layer_norm_backward, as the unfused graph's add would form it.
std::vector<Var> grad_add_layer_norm(const GradContext& c) {
  Var ds = c.grad_outputs[0];
  Var dgamma, dbeta;
  if (c.grad_outputs[1].defined()) {
    std::vector<Var> in{cast(c.grad_outputs[1], c.outputs[0].dtype()), c.outputs[0], c.inputs[2], c.outputs[2], c.outputs[3]};
    if (ds.defined()) in.push_back(ds);
    auto g = graph::apply("layer_norm_backward", in);
    ds = g[0];
    dgamma = g[1];
    dbeta = g[2];
  }
  if (!ds.defined()) ds = c.grad_output(0);
  return {c.needs_grad[0] ? ds : Var(), c.needs_grad[1] ? unbroadcast(ds, c.inputs[1]) : Var(),
          c.needs_grad[2] ? dgamma : Var(), c.needs_grad[3] ? dbeta : Var()};
}
}  // namespace
AddLayerNorm add_layer_norm(const Var& a, const Var& b, const Var& gamma, const Var& beta, double eps) {
  auto out = apply("add_layer_norm", {a, b, gamma, beta}, Attrs().set("eps", eps));
  return {out[0], out[1]};
}
TROUPE_DEFINE_OP({.name = "add_layer_norm", .infer = infer_add_layer_norm, .compute = compute_add_layer_norm,
                  .grad = grad_add_layer_norm, .precision = Precision::keeps_f32});

}  // namespace troupe::graph
