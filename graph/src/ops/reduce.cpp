// Reductions (sum, mean, max) and the two broadcasting ops their gradients need (sum_to and
// broadcast_to, each the other's gradient).
#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/reduce.hpp"
#include "troupe/kernels/select.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

// The reduced shape, with reduced dims kept as 1 when `keepdim`.
SymShape reduced_shape(const SymShape& s, const std::vector<bool>& mask, bool keepdim) {
  SymShape out;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!mask[i]) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  return out;
}

std::vector<ValueInfo> infer_reduce(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  const SymShape& s = c.inputs[0].shape;
  return one(c.inputs[0].dtype, reduced_shape(s, reduced_axes(c, s.size()), get_flag(c.attrs, "keepdim")));
}

template <Tensor (*F)(const Tensor&, std::vector<std::int64_t>, bool)>
std::vector<Tensor> compute_reduce(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {F(in[0], c.attrs.get_ints("axes"), get_flag(c.attrs, "keepdim"))};
}

// dy reshaped so it broadcasts against x: reduced dims restored as 1.
Var keepdim_view(const Var& dy, const Var& x, const Attrs& attrs) {
  if (get_flag(attrs, "keepdim")) return dy;
  const auto& axes = attrs.get_ints("axes");
  std::vector<bool> mask(static_cast<std::size_t>(x.dim()), axes.empty());
  for (auto a : axes) mask[static_cast<std::size_t>(normalize_axis(a, mask.size(), "reduce"))] = true;
  return reshape(dy, reduced_shape(x.shape(), mask, true));
}

std::vector<Var> grad_sum(const GradContext& c) {
  return {broadcast_to(keepdim_view(c.grad_output(0), c.inputs[0], c.attrs), c.inputs[0])};
}
std::vector<Var> grad_mean(const GradContext& c) {
  const Var dy = keepdim_view(c.grad_output(0), c.inputs[0], c.attrs);
  return {apply1("mean_backward", {dy, c.inputs[0]})};
}
std::vector<Var> grad_max(const GradContext& c) {
  const Var dy = keepdim_view(c.grad_output(0), c.inputs[0], c.attrs);
  const Var y = keepdim_view(c.outputs[0], c.inputs[0], c.attrs);
  return {apply1("max_backward", {dy, c.inputs[0], y})};
}

// sum(x * x) as a 0-d value of x's dtype, accumulated in double (gradient norms, L2 penalties).
std::vector<ValueInfo> infer_squared_norm(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  return one(c.inputs[0].dtype, {});
}
std::vector<Tensor> compute_squared_norm(const std::vector<Tensor>& in, const ComputeContext&) {
  return {Tensor::scalar(kernels::squared_norm(in[0]), in[0].dtype())};
}
std::vector<Var> grad_squared_norm(const GradContext& c) {
  return {broadcast_to(c.grad_output(0), c.inputs[0]) * c.inputs[0] * 2.0};
}

Attrs axes_attrs(const std::vector<std::int64_t>& axes, bool keepdim) {
  return Attrs().set("axes", axes).set("keepdim", std::int64_t{keepdim});
}

// Inputs (x, like): the output has like's shape; `like` contributes only its shape.
std::vector<ValueInfo> infer_like(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  return one(c.inputs[0].dtype, c.inputs[1].shape);
}

std::vector<ValueInfo> infer_sum_to(const InferContext& c) {
  auto out = infer_like(c);
  if (broadcast(c.inputs[0].shape, c.inputs[1].shape, c.op) != c.inputs[0].shape)
    shape_error(c, "the first input must be a broadcast of the second");
  return out;
}
std::vector<ValueInfo> infer_broadcast_to(const InferContext& c) {
  auto out = infer_like(c);
  if (broadcast(c.inputs[0].shape, c.inputs[1].shape, c.op) != c.inputs[1].shape)
    shape_error(c, "the first input does not broadcast to the second");
  return out;
}

std::vector<ValueInfo> infer_mean_backward(const InferContext& c) {
  auto out = infer_broadcast_to(c);
  expect_same_dtype(c, 0, 1);
  return out;
}
std::vector<Tensor> compute_mean_backward(const std::vector<Tensor>& in, const ComputeContext& c) {
  const Shape& x = c.output_shapes[0];
  const double count = static_cast<double>(shape_numel(x)) / static_cast<double>(in[0].numel());
  return {kernels::mul(in[0].expand(x), 1.0 / count)};
}

std::vector<Tensor> compute_sum_to(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::sum_to_shape(in[0], c.output_shapes[0])};
}
std::vector<Tensor> compute_broadcast_to(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {in[0].expand(c.output_shapes[0])};
}

std::vector<ValueInfo> infer_max_backward(const InferContext& c) {
  expect_arity(c, 3, 3);
  expect_floating(c, 1);
  expect_same_dtype(c, 0, 1);
  expect_same_dtype(c, 2, 1);
  return one(c.inputs[1].dtype, c.inputs[1].shape);
}
// Sharding of sum (`sum` true) and mean: a dim the reduction keeps may be split, the output split
// along the dim it becomes; a dim reduced over gives partial sums (each device sums its slice; a
// mean's, divided by its slice's length, is scaled to its share: mean_of_split); partial sums pass
// through both.
std::vector<ShardSignature> shard_reduction(const ShardContext& c, bool sum) {
  const std::size_t rank = c.inputs[0].shape.size();
  const auto& axes = c.attrs.get_ints("axes");
  const bool keepdim = get_flag(c.attrs, "keepdim");
  std::vector<bool> reduced(rank, axes.empty());
  for (std::int64_t a : axes) reduced[static_cast<std::size_t>(a < 0 ? a + static_cast<std::int64_t>(rank) : a)] = true;
  std::vector<ShardSignature> out;
  int kept = 0;  // the output dim input dim d becomes
  for (std::size_t d = 0; d < rank; ++d) {
    const Placement in = Placement::split(static_cast<int>(d));
    if (!reduced[d]) out.push_back({{in}, {Placement::split(keepdim ? static_cast<int>(d) : kept)}});
    else out.push_back({{in}, {Placement::partial_sum()}, !sum});
    if (!reduced[d] || keepdim) ++kept;
  }
  out.push_back({{Placement::partial_sum()}, {Placement::partial_sum()}});
  return out;
}
std::vector<ShardSignature> shard_sum(const ShardContext& c) { return shard_reduction(c, true); }
// Sharding of mean_backward(dy, x): as elementwise ops; where x's split dim was averaged over (dy
// has size 1 there), each device divides by its own slice's length: mean_of_split.
std::vector<ShardSignature> shard_mean_backward(const ShardContext& c) {
  std::vector<ShardSignature> out = shard_linear_in_first(c);
  for (ShardSignature& s : out)
    s.mean_of_split = s.inputs[1].kind == Placement::Kind::split && s.inputs[0].kind == Placement::Kind::broadcast;
  return out;
}
// Sharding of broadcast_to(x, like): as elementwise ops, linear in x; `like` only gives the shape,
// so a partial sum's (whole) serves as a broadcast's.
std::vector<ShardSignature> shard_broadcast_to(const ShardContext& c) {
  std::vector<ShardSignature> out = shard_linear_in_first(c);
  const Placement B = Placement::broadcast(), P = Placement::partial_sum();
  out.push_back({{B, P}, {B}});
  out.push_back({{P, P}, {P}});
  return out;
}
// Sharding of sum_to(x, like): a dim of x that `like` keeps splits both and the result; a dim
// summed away gives partial sums (`like` whole); partial sums pass through x.
std::vector<ShardSignature> shard_sum_to(const ShardContext& c) {
  const SymShape &x = c.inputs[0].shape, &like = c.inputs[1].shape;
  const std::size_t rank = x.size(), r = like.size();
  std::vector<ShardSignature> out;
  for (std::size_t d = 0; d < rank; ++d) {
    const bool kept = d + r >= rank && !(like[d + r - rank].is_static() && like[d + r - rank].size() == 1);
    const Placement in = Placement::split(static_cast<int>(d));
    if (kept) out.push_back({{in, Placement::split(static_cast<int>(d + r - rank))}, {Placement::split(static_cast<int>(d + r - rank))}});
    else out.push_back({{in, Placement::broadcast()}, {Placement::partial_sum()}});
  }
  // `like` only gives the shape: a partial sum's is whole, as a broadcast's.
  out.push_back({{Placement::partial_sum(), Placement::broadcast()}, {Placement::partial_sum()}});
  out.push_back({{Placement::partial_sum(), Placement::partial_sum()}, {Placement::partial_sum()}});
  // A blocked split (Placement::blocks) of a kept dim stays blocked.
  const Placement& now = c.current[0];
  if (now.kind == Placement::Kind::split && now.blocks > 1 && now.dim + r >= rank) {
    const Placement kept = Placement::split(static_cast<int>(now.dim + r - rank), now.blocks);
    out.push_back({{now, kept}, {kept}});
  }
  return out;
}
std::vector<ShardSignature> shard_mean(const ShardContext& c) { return shard_reduction(c, false); }

}  // namespace

Var sum(const Var& x, const std::vector<std::int64_t>& axes, bool keepdim) {
  return apply1("sum", {x}, axes_attrs(axes, keepdim));
}
// compute: kernels::sum (the "reduce" kernel); likewise mean and max.
TROUPE_DEFINE_OP({.name = "sum", .infer = infer_reduce, .sharding = shard_sum, .compute = compute_reduce<kernels::sum>, .grad = grad_sum,
                  .precision = Precision::keeps_f32});

Var mean(const Var& x, const std::vector<std::int64_t>& axes, bool keepdim) {
  return apply1("mean", {x}, axes_attrs(axes, keepdim));
}
TROUPE_DEFINE_OP({.name = "mean", .infer = infer_reduce, .sharding = shard_mean, .compute = compute_reduce<kernels::mean>, .grad = grad_mean,
                  .precision = Precision::keeps_f32});
// mean's gradient: dy broadcast to x's shape, divided by the number of elements averaged.
TROUPE_DEFINE_OP({.name = "mean_backward", .infer = infer_mean_backward, .sharding = shard_mean_backward, .compute = compute_mean_backward,
                  .no_grad_inputs = {1}});

Var max(const Var& x, const std::vector<std::int64_t>& axes, bool keepdim) {
  return apply1("max", {x}, axes_attrs(axes, keepdim));
}
TROUPE_DEFINE_OP({.name = "max", .infer = infer_reduce, .compute = compute_reduce<kernels::max>, .grad = grad_max,
                  .precision = Precision::f32});
// max's gradient (dy, x, y): dy where x equals the maximum y.
TROUPE_DEFINE_OP({.name = "max_backward", .infer = infer_max_backward, .kernel = "max_backward"});

Var squared_norm(const Var& x) { return apply1("squared_norm", {x}); }
// compute: kernels::squared_norm, accumulated in double, returned as a 0-d value of x's dtype.
TROUPE_DEFINE_OP({.name = "squared_norm", .infer = infer_squared_norm, .compute = compute_squared_norm,
                  .grad = grad_squared_norm, .host_reads = true, .precision = Precision::f32});

// sum_to and broadcast_to are each other's gradient; `like` (input 1) gives only its shape.
Var sum_to(const Var& x, const Var& like) { return apply1("sum_to", {x, like}); }
TROUPE_DEFINE_OP({.name = "sum_to", .infer = infer_sum_to, .sharding = shard_sum_to, .compute = compute_sum_to,
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {broadcast_to(c.grad_output(0), c.inputs[0]), Var()};
                  },
                  .no_grad_inputs = {1}});
Var broadcast_to(const Var& x, const Var& like) { return apply1("broadcast_to", {x, like}); }
TROUPE_DEFINE_OP({.name = "broadcast_to", .infer = infer_broadcast_to, .cost = moves_only, .sharding = shard_broadcast_to, .compute = compute_broadcast_to,
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {sum_to(c.grad_output(0), c.inputs[0]), Var()};
                  },
                  .no_grad_inputs = {1}});

}  // namespace troupe::graph
