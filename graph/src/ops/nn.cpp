// Op definitions of the neural-network kernels: softmax, layer norm, embedding, cross-entropy,
// convolution and the causal attention mask, each with its backward op.
#include <algorithm>
#include <limits>

#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/attention.hpp"
#include "troupe/kernels/conv.hpp"
#include "troupe/kernels/embedding.hpp"
#include "troupe/kernels/layernorm.hpp"
#include "troupe/kernels/loss.hpp"
#include "troupe/kernels/select.hpp"
#include "troupe/kernels/softmax.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

std::vector<ValueInfo> infer_softmax(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  axis_of(c, c.attrs.get_int("axis"), c.inputs[0].shape.size());
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}

template <Tensor (*F)(const Tensor&, std::int64_t)>
std::vector<Tensor> compute_axis(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {F(in[0], c.attrs.get_int("axis"))};
}
template <Tensor (*F)(const Tensor&, const Tensor&, std::int64_t)>
std::vector<Tensor> compute_axis_backward(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {F(in[0], in[1], c.attrs.get_int("axis"))};
}
// Softmax gradients need only the output y, so the backward op reads (grad, y).
GradFn axis_grad(const char* backward) {
  return [backward](const GradContext& c) -> std::vector<Var> {
    return {apply1(backward, {c.grad_output(0), c.outputs[0]}, c.attrs)};
  };
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
  return {ValueInfo{c.inputs[0].dtype, x}, ValueInfo{stats, rows}, ValueInfo{stats, rows}};
}
std::vector<Tensor> compute_layer_norm(const std::vector<Tensor>& in, const ComputeContext& c) {
  auto r = kernels::layernorm(in[0], in[1], in[2], c.attrs.get_double("eps"));
  return {r.y, r.mean, r.rstd};
}
std::vector<Var> grad_layer_norm(const GradContext& c) {
  auto g = apply("layer_norm_backward", {c.grad_output(0), c.inputs[0], c.inputs[1], c.outputs[1], c.outputs[2]});
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
  return {ValueInfo{t, a}, ValueInfo{t, a}, ValueInfo{stats, rows}, ValueInfo{stats, rows}};
}
std::vector<Tensor> compute_add_layer_norm(const std::vector<Tensor>& in, const ComputeContext& c) {
  auto r = kernels::add_layernorm(in[0], in[1], in[2], in[3], c.attrs.get_double("eps"));
  return {r.sum, r.y, r.mean, r.rstd};
}
// The sum's gradient is what reaches s from its other readers plus the layer norm's dx, formed by
// one layer_norm_backward, as the unfused graph's add would form it.
std::vector<Var> grad_add_layer_norm(const GradContext& c) {
  Var ds = c.grad_outputs[0];
  Var dgamma, dbeta;
  if (c.grad_outputs[1].defined()) {
    std::vector<Var> in{c.grad_outputs[1], c.outputs[0], c.inputs[2], c.outputs[2], c.outputs[3]};
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

std::vector<ValueInfo> infer_embedding(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  expect_integer(c, 1);
  expect_rank(c, 0, 2, "weight [num_embeddings, dim]");
  SymShape out = c.inputs[1].shape;
  out.push_back(c.inputs[0].shape[1]);
  return one(c.inputs[0].dtype, out);
}
// The table's slice that a vocab-parallel device holds (attributes "first" and "table"; none: the whole table).
kernels::TableSlice table_slice(const Attrs& a) {
  return a.has("table") ? kernels::TableSlice{a.get_int("first"), a.get_int("table")} : kernels::TableSlice{};
}
std::vector<Tensor> compute_embedding(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::embedding(in[0], in[1], table_slice(c.attrs))};
}
std::vector<Var> grad_embedding(const GradContext& c) {
  const Attrs a = Attrs().set("num", c.inputs[0].size(0).size());
  return {apply1("embedding_backward", {c.grad_output(0), c.inputs[1]}, a), Var()};
}
std::vector<ValueInfo> infer_embedding_backward(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_integer(c, 1);
  return one(c.inputs[0].dtype, {c.attrs.get_int("num"), c.inputs[0].shape.back()});
}
std::vector<Tensor> compute_embedding_backward(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::embedding_backward(in[0], in[1], c.attrs.get_int("num"), table_slice(c.attrs))};
}

// cross_entropy(logits[..., C], targets[...]): the kernels take rows, so leading dims are flattened.
std::vector<ValueInfo> infer_cross_entropy(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  expect_integer(c, 1);
  const SymShape& l = c.inputs[0].shape;
  if (l.empty() || SymShape(l.begin(), l.end() - 1) != c.inputs[1].shape)
    shape_error(c, "expected logits [..., classes] and targets [...] with the same leading dims");
  return one(accumulation_dtype(c.inputs[0].dtype), {});
}
std::vector<Tensor> compute_cross_entropy(const std::vector<Tensor>& in, const ComputeContext&) {
  return {kernels::cross_entropy(rows_of(in[0]), flat(in[1]))};
}
std::vector<Var> grad_cross_entropy(const GradContext& c) {
  return {apply1("cross_entropy_backward", {c.grad_output(0), c.inputs[0], c.inputs[1]}), Var()};
}
std::vector<ValueInfo> infer_cross_entropy_backward(const InferContext& c) {
  expect_arity(c, 3, 3);
  return one(c.inputs[1].dtype, c.inputs[1].shape);
}
std::vector<Tensor> compute_cross_entropy_backward(const std::vector<Tensor>& in, const ComputeContext&) {
  const Tensor g = kernels::cross_entropy_backward(in[0], rows_of(in[1]), flat(in[2]));
  return {g.view(in[1].shape())};
}

// An optional 0/1 attribute of conv2d (set by level-3 passes).
bool conv_flag(const Attrs& a, const char* name) { return a.has(name) && a.get_int(name) != 0; }
kernels::Conv2dParams conv_params(const Attrs& a) {
  const auto s = a.get_int("stride"), p = a.get_int("padding");
  return kernels::Conv2dParams{s, s, p, p, conv_flag(a, "relu"), conv_flag(a, "blocked_input"),
                               conv_flag(a, "blocked_output"), conv_flag(a, "winograd")};
}
// [N, C/16, H, W, 16] <-> [N, C, H, W] for symbolic shapes (the channel count is always fixed).
SymShape unblocked(const InferContext& c, const SymShape& x) {
  if (x.size() != 5 || x[4] != SymDim(kernels::kChannelBlock) || !x[1].is_static())
    shape_error(c, "a channel-blocked input must be [N, C/16, H, W, 16]");
  return {x[0], SymDim(x[1].size() * kernels::kChannelBlock), x[2], x[3]};
}
SymShape blocked(const InferContext& c, const SymShape& y) {
  if (!y[1].is_static() || y[1].size() % kernels::kChannelBlock != 0)
    shape_error(c, "a channel-blocked output needs a channel count divisible by 16");
  return {y[0], SymDim(y[1].size() / kernels::kChannelBlock), y[2], y[3], SymDim(kernels::kChannelBlock)};
}
// Output size of one spatial dim; symbolic sizes are allowed only where the output equals the input.
SymDim conv_out(const InferContext& c, const SymDim& in, const SymDim& k, std::int64_t stride, std::int64_t pad) {
  if (!k.is_static()) shape_error(c, "the kernel size must be fixed");
  if (in.is_static()) {
    const std::int64_t o = (in.size() + 2 * pad - k.size()) / stride + 1;
    if (in.size() + 2 * pad < k.size()) shape_error(c, "the padded input is smaller than the kernel");
    return o;
  }
  if (stride == 1 && 2 * pad == k.size() - 1) return in;
  shape_error(c, "a symbolic spatial size (" + in.str() + ") needs stride 1 and 'same' padding");
}
std::vector<ValueInfo> infer_conv2d(const InferContext& c) {
  expect_arity(c, 2, 3);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  const bool blocked_in = conv_flag(c.attrs, "blocked_input"), blocked_out = conv_flag(c.attrs, "blocked_output");
  if (!blocked_in) expect_rank(c, 0, 4, "x [N, C, H, W]");
  expect_rank(c, 1, 4, "w [O, C, kh, kw]");
  const SymShape x = blocked_in ? unblocked(c, c.inputs[0].shape) : c.inputs[0].shape;
  const SymShape& w = c.inputs[1].shape;
  if (x[1] != w[1]) shape_error(c, "input channels " + x[1].str() + " differ from the weight's " + w[1].str());
  const DType y_dtype = product_dtype(c);
  if (c.inputs.size() == 3) {
    if (c.inputs[2].dtype != y_dtype) shape_error(c, std::string("bias must have the result's dtype, ") + dtype_name(y_dtype));
    if (c.inputs[2].shape != SymShape{w[0]}) shape_error(c, "bias must have shape [" + w[0].str() + "]");
  }
  const auto s = c.attrs.get_int("stride"), p = c.attrs.get_int("padding");
  if (s < 1 || p < 0) shape_error(c, "stride must be >= 1 and padding >= 0");
  const SymShape y{x[0], w[0], conv_out(c, x[2], w[2], s, p), conv_out(c, x[3], w[3], s, p)};
  return one(y_dtype, blocked_out ? blocked(c, y) : y);
}
std::vector<ValueInfo> infer_conv2d_residual(const InferContext& c) {
  expect_arity(c, 3, 4);
  const std::vector<ValueInfo> conv_inputs(c.inputs.begin() + 1, c.inputs.end());
  const std::vector<ValueInfo> out = infer_conv2d(InferContext{c.op, conv_inputs, c.attrs, c.target});
  if (c.inputs[0].dtype != out[0].dtype || c.inputs[0].shape != out[0].shape)
    shape_error(c, "the residual must have the output's dtype and shape " + sym_shape_str(out[0].shape));
  return out;
}
std::vector<Var> grad_conv2d(const GradContext& c) {
  // With a relu epilogue (conv-relu fusion), the output is positive exactly where the conv's was.
  const bool relu = conv_flag(c.attrs, "relu");
  if (conv_flag(c.attrs, "blocked_input") || conv_flag(c.attrs, "blocked_output") || conv_flag(c.attrs, "winograd"))
    fail(ErrorKind::unsupported, "conv2d with a channel-blocked layout or Winograd has no gradient: both are chosen "
         "for inference graphs only (TracedFunction::for_inference)");
  const Var dy = relu ? relu_backward(c.grad_output(0), c.outputs[0], 0.0) : c.grad_output(0);
  // The operands' gradients come in the operands' dtype (bf16 under mixed precision), so dy joins
  // them in it: one cast both share. The bias's gradient sums dy as it is.
  const Var dy_low = cast(dy, c.inputs[0].dtype());
  std::vector<Var> g(c.inputs.size());
  if (c.needs_grad[0]) g[0] = apply1("conv2d_backward_data", {dy_low, c.inputs[1], c.inputs[0]}, c.attrs);
  if (c.needs_grad[1]) g[1] = apply1("conv2d_backward_weight", {dy_low, c.inputs[0], c.inputs[1]}, c.attrs);
  if (c.inputs.size() == 3 && c.needs_grad[2]) g[2] = apply1("conv2d_backward_bias", {dy});
  return g;
}
std::vector<Tensor> compute_conv2d(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::conv2d(in[0], in[1], in.size() == 3 ? in[2] : Tensor(), conv_params(c.attrs), c.output_dtypes[0])};
}
// (grad, other operand, like): the result has the shape of `like`, the operand being differentiated.
std::vector<ValueInfo> infer_conv_backward(const InferContext& c) {
  expect_arity(c, 3, 3);
  return one(c.inputs[0].dtype, c.inputs[2].shape);
}
std::vector<Tensor> compute_conv2d_backward_data(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::conv2d_backward_data(in[0], in[1], c.output_shapes[0], conv_params(c.attrs))};
}
std::vector<Tensor> compute_conv2d_backward_weight(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::conv2d_backward_weight(in[0], in[1], c.output_shapes[0], conv_params(c.attrs))};
}
std::vector<ValueInfo> infer_conv2d_backward_bias(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_rank(c, 0, 4, "grad [N, O, H, W]");
  return one(c.inputs[0].dtype, {c.inputs[0].shape[1]});
}
std::vector<Tensor> compute_conv2d_backward_bias(const std::vector<Tensor>& in, const ComputeContext&) {
  return {kernels::conv2d_backward_bias(in[0])};
}

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
std::vector<Tensor> compute_causal_attention(const std::vector<Tensor>& in, const ComputeContext& c) {
  auto r = kernels::causal_attention(in[0], in[1], in[2], c.attrs.get_double("scale"));
  return {r.y, r.lse};
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
  auto g = kernels::causal_attention_backward(in[0], in[1], in[2], in[3], in[4], in[5], c.attrs.get_double("scale"));
  return {g.dq, g.dk, g.dv};
}

// Sharding of embedding (weight [num, dim], ids): ids split give rows split alike; the table split
// by columns gives the looked-up rows split by columns; lookups are linear in the table, so a
// partial-sum table gives partial sums; the table split by rows (the vocabulary) gives partial
// sums too, each device looking up the ids of its rows (Megatron's vocab-parallel embedding).
std::vector<ShardSignature> shard_embedding(const ShardContext& c) {
  const int ids_rank = static_cast<int>(c.inputs[1].shape.size());
  const Placement B = Placement::broadcast(), P = Placement::partial_sum();
  std::vector<ShardSignature> out;
  for (int d = 0; d < ids_rank; ++d) out.push_back({{B, Placement::split(d)}, {Placement::split(d)}});
  out.push_back({{Placement::split(1), B}, {Placement::split(ids_rank)}});
  out.push_back({{P, B}, {P}});
  out.push_back({{Placement::split(0), B}, {P}, false, expand_vocab_embedding});
  return out;
}
// Sharding of embedding_backward (grad [..., dim], ids): rows split alike scatter into the whole
// table as partial sums; columns split give the table's columns; partial sums pass through grad;
// whole rows give each device its rows of the table (vocab-parallel).
std::vector<ShardSignature> shard_embedding_backward(const ShardContext& c) {
  const int ids_rank = static_cast<int>(c.inputs[1].shape.size());
  const Placement B = Placement::broadcast(), P = Placement::partial_sum();
  std::vector<ShardSignature> out;
  for (int d = 0; d < ids_rank; ++d) out.push_back({{Placement::split(d), Placement::split(d)}, {P}});
  out.push_back({{Placement::split(ids_rank), B}, {Placement::split(1)}});
  out.push_back({{P, B}, {P}});
  out.push_back({{B, B}, {Placement::split(0)}, false, expand_vocab_embedding_backward});
  return out;
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
// Sharding of cross_entropy (logits [..., classes], targets [...]): rows split alike give each
// device the mean over its rows, scaled to its share of the mean over all (mean_of_split); the
// classes split give every device the whole loss, the devices exchanging each row's maximum and
// sums (vocab-parallel: the logits are never gathered).
std::vector<ShardSignature> shard_cross_entropy(const ShardContext& c) {
  const int classes = static_cast<int>(c.inputs[0].shape.size()) - 1;
  std::vector<ShardSignature> out;
  for (int d = 0; d < classes; ++d) {
    const Placement split = Placement::split(d);
    out.push_back({{split, split}, {Placement::partial_sum()}, true});
  }
  if (classes >= 0 && c.inputs[0].shape.back().is_static())
    out.push_back({{Placement::split(classes), Placement::broadcast()}, {Placement::broadcast()}, false,
                   expand_vocab_cross_entropy, 2});
  return out;
}
// Sharding of cross_entropy_backward (dloss, logits, targets): rows split alike, each device's
// gradient divided by its own row count, so scaled to its share (mean_of_split); linear in dloss;
// the classes split give the gradient's columns alike (vocab-parallel).
std::vector<ShardSignature> shard_cross_entropy_backward(const ShardContext& c) {
  const Placement B = Placement::broadcast(), P = Placement::partial_sum();
  const int classes = static_cast<int>(c.inputs[1].shape.size()) - 1;
  std::vector<ShardSignature> out;
  for (int d = 0; d < classes; ++d) {
    const Placement split = Placement::split(d);
    out.push_back({{B, split, split}, {split}, true});
  }
  out.push_back({{P, B, B}, {P}});
  if (classes >= 0 && c.inputs[1].shape.back().is_static())
    out.push_back({{B, Placement::split(classes), B}, {Placement::split(classes)}, false, expand_vocab_cross_entropy_backward, 2});
  return out;
}
// Sharding of causal_mask: each [queries, keys] square stays whole; batch and head dims split.
std::vector<ShardSignature> shard_causal_mask(const ShardContext& c) { return shard_rows(c, 2, 1); }
// Sharding of causal_attention (q, k, v): batch and head dims; each head's [T, D] stays whole.
std::vector<ShardSignature> shard_attention(const ShardContext& c) { return shard_rows(c, 2, 3); }

}  // namespace

// compute: kernels::softmax / log_softmax; the backward ops read (dy, y).
Var softmax(const Var& x, std::int64_t axis) { return apply1("softmax", {x}, Attrs().set("axis", axis)); }
TROUPE_DEFINE_OP({.name = "softmax", .infer = infer_softmax, .sharding = shard_all_but_axis, .compute = compute_axis<kernels::softmax>,
                  .grad = axis_grad("softmax_backward"), .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "softmax_backward", .infer = infer_grad_pair, .sharding = shard_all_but_axis,
                  .compute = compute_axis_backward<kernels::softmax_backward>});
Var log_softmax(const Var& x, std::int64_t axis) { return apply1("log_softmax", {x}, Attrs().set("axis", axis)); }
TROUPE_DEFINE_OP({.name = "log_softmax", .infer = infer_softmax, .sharding = shard_all_but_axis, .compute = compute_axis<kernels::log_softmax>,
                  .grad = axis_grad("log_softmax_backward"), .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "log_softmax_backward", .infer = infer_grad_pair, .sharding = shard_all_but_axis,
                  .compute = compute_axis_backward<kernels::log_softmax_backward>});

// layer_norm(x, gamma, beta) -> (y, mean, rstd): compute kernels::layernorm; mean and rstd are
// saved for layer_norm_backward (kernels::layernorm_backward), which gives dx, dgamma, dbeta.
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  return apply("layer_norm", {x, gamma, beta}, Attrs().set("eps", eps))[0];
}
TROUPE_DEFINE_OP({.name = "layer_norm", .infer = infer_layer_norm, .sharding = shard_layer_norm, .compute = compute_layer_norm, .grad = grad_layer_norm,
                  .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "layer_norm_backward", .infer = infer_layer_norm_backward, .sharding = shard_layer_norm_backward,
                  .compute = compute_layer_norm_backward});
AddLayerNorm add_layer_norm(const Var& a, const Var& b, const Var& gamma, const Var& beta, double eps) {
  auto out = apply("add_layer_norm", {a, b, gamma, beta}, Attrs().set("eps", eps));
  return {out[0], out[1]};
}
TROUPE_DEFINE_OP({.name = "add_layer_norm", .infer = infer_add_layer_norm, .compute = compute_add_layer_norm,
                  .grad = grad_add_layer_norm, .precision = Precision::keeps_f32});

// compute: kernels::embedding; the ids (input 1) take no gradient.
Var embedding(const Var& weight, const Var& ids) { return apply1("embedding", {weight, ids}); }
TROUPE_DEFINE_OP({.name = "embedding", .infer = infer_embedding, .sharding = shard_embedding, .compute = compute_embedding, .grad = grad_embedding,
                  .no_grad_inputs = {1}, .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "embedding_backward", .infer = infer_embedding_backward, .sharding = shard_embedding_backward, .compute = compute_embedding_backward,
                  .no_grad_inputs = {1}});

// compute: kernels::cross_entropy over the rows of the flattened logits; targets take no gradient.
Var cross_entropy(const Var& logits, const Var& targets) { return apply1("cross_entropy", {logits, targets}); }
TROUPE_DEFINE_OP({.name = "cross_entropy", .infer = infer_cross_entropy, .sharding = shard_cross_entropy, .compute = compute_cross_entropy,
                  .grad = grad_cross_entropy, .no_grad_inputs = {1}, .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "cross_entropy_backward", .infer = infer_cross_entropy_backward, .sharding = shard_cross_entropy_backward,
                  .compute = compute_cross_entropy_backward, .no_grad_inputs = {2}});

// Built from other ops: mean((y - target)^2).
Var mse_loss(const Var& y, const Var& target) {
  const Var d = y - target;
  return mean(d * d);
}

// compute: kernels::conv2d (oneDNN or im2col + GEMM); each backward op's input 2 gives only a shape.
// Attribute relu=1 (set by conv-relu fusion) adds a relu epilogue.
Var conv2d(const Var& x, const Var& w, const Var& bias, std::int64_t stride, std::int64_t padding) {
  return apply1("conv2d", {x, w, bias}, Attrs().set("stride", stride).set("padding", padding));
}
Var conv2d(const Var& x, const Var& w, std::int64_t stride, std::int64_t padding) {
  return apply1("conv2d", {x, w}, Attrs().set("stride", stride).set("padding", padding));
}
TROUPE_DEFINE_OP({.name = "conv2d", .infer = infer_conv2d, .compute = compute_conv2d, .grad = grad_conv2d,
                  .autocast_inputs = {0, 1}});
// conv2d_residual(r, x, w[, b]) = conv2d(x, w[, b]) + r, conv2d's attributes: the residual add fused
// into the convolution by conv-residual fusion (level 3, inference graphs; no gradient). Output 0
// may be written over r when r dies there; the kernel adds the convolution to it.
TROUPE_DEFINE_OP({.name = "conv2d_residual", .infer = infer_conv2d_residual, .kernel = "conv2d_residual",
                  .in_place = true, .in_place_input = 0});
TROUPE_DEFINE_OP({.name = "conv2d_backward_data", .infer = infer_conv_backward, .compute = compute_conv2d_backward_data,
                  .no_grad_inputs = {2}});
TROUPE_DEFINE_OP({.name = "conv2d_backward_weight", .infer = infer_conv_backward,
                  .compute = compute_conv2d_backward_weight, .no_grad_inputs = {2}});
TROUPE_DEFINE_OP({.name = "conv2d_backward_bias", .infer = infer_conv2d_backward_bias,
                  .compute = compute_conv2d_backward_bias});

// softmax(causal_mask(scale * q k^T)) v in one kernel (kernels::causal_attention) that never holds
// the T x T scores; y's log-sum-exp per row (output 1) is saved for causal_attention_backward.
Var causal_attention(const Var& q, const Var& k, const Var& v, double scale) {
  return apply("causal_attention", {q, k, v}, Attrs().set("scale", scale))[0];
}
TROUPE_DEFINE_OP({.name = "causal_attention", .infer = infer_causal_attention, .sharding = shard_attention, .compute = compute_causal_attention,
                  .grad = grad_causal_attention, .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "causal_attention_backward", .infer = infer_causal_attention_backward,
                  .compute = compute_causal_attention_backward});

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
