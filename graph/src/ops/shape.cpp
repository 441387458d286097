// Ops that move or reinterpret elements: reshape, transpose, permute, concat, split, pixel
// shuffle, casts, and the identity-like ops (identity, stop_gradient, zeros_like).
#include <numeric>

#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/layout.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

std::vector<ValueInfo> infer_reshape(const InferContext& c) {
  expect_arity(c, 1, 1);
  const SymDim total = numel(c.inputs[0].shape);
  SymShape out = c.target;
  int infer_at = -1;
  SymDim known(1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == SymDim(-1)) {
      if (infer_at >= 0) shape_error(c, "target " + sym_shape_str(c.target) + " has more than one -1");
      infer_at = static_cast<int>(i);
    } else {
      known = known * out[i];
    }
  }
  if (infer_at >= 0) {
    auto q = total.divide(known);
    if (!q) shape_error(c, "cannot infer the -1 of " + sym_shape_str(c.target) + ": " + total.str() +
                                " elements are not a multiple of " + known.str());
    out[static_cast<std::size_t>(infer_at)] = *q;
  } else if (known != total) {
    shape_error(c, "cannot reshape " + total.str() + " elements into " + sym_shape_str(c.target) + " (" + known.str() +
                       " elements)");
  }
  return one(c.inputs[0].dtype, out);
}

std::vector<ValueInfo> infer_permute(const InferContext& c) {
  expect_arity(c, 1, 1);
  const SymShape& s = c.inputs[0].shape;
  const auto& dims = c.attrs.get_ints("dims");
  if (dims.size() != s.size()) shape_error(c, "permutation " + shape_str(dims) + " does not match the rank");
  std::vector<bool> seen(s.size(), false);
  SymShape out;
  for (auto d : dims) {
    const int a = axis_of(c, d, s.size());
    if (seen[static_cast<std::size_t>(a)]) shape_error(c, "permutation " + shape_str(dims) + " repeats a dim");
    seen[static_cast<std::size_t>(a)] = true;
    out.push_back(s[static_cast<std::size_t>(a)]);
  }
  return one(c.inputs[0].dtype, out);
}

std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> inv(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto d = dims[i] < 0 ? dims[i] + static_cast<std::int64_t>(dims.size()) : dims[i];
    inv[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(i);
  }
  return inv;
}

std::vector<Tensor> compute_reshape(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {in[0].reshape(c.output_shapes[0])};
}
std::vector<Tensor> compute_permute(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {in[0].permute(c.attrs.get_ints("dims"))};
}

std::vector<ValueInfo> infer_concat(const InferContext& c) {
  expect_arity(c, 1, 1024);
  const SymShape& first = c.inputs[0].shape;
  const int ax = axis_of(c, c.attrs.get_int("axis"), first.size());
  SymShape out = first;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    expect_same_dtype(c, 0, i);
    const SymShape& s = c.inputs[i].shape;
    if (s.size() != first.size()) shape_error(c, "all inputs need the same rank");
    for (std::size_t d = 0; d < s.size(); ++d)
      if (static_cast<int>(d) != ax && s[d] != first[d])
        shape_error(c, "input " + std::to_string(i) + " differs from input 0 in dim " + std::to_string(d) +
                           "; only dim " + std::to_string(ax) + " may differ");
    if (!s[static_cast<std::size_t>(ax)].is_static() && c.inputs.size() > 1)
      shape_error(c, "concat along a symbolic dimension is not supported; concatenate along a fixed one");
    total += s[static_cast<std::size_t>(ax)].size();
  }
  if (c.inputs.size() > 1) out[static_cast<std::size_t>(ax)] = total;
  return one(c.inputs[0].dtype, out);
}

std::vector<Var> grad_concat(const GradContext& c) {
  std::vector<std::int64_t> sizes;
  const std::int64_t axis = c.attrs.get_int("axis");
  for (const auto& in : c.inputs) sizes.push_back(in.size(axis).size());
  if (c.inputs.size() == 1) return {c.grad_output(0)};
  return split(c.grad_output(0), sizes, axis);
}

std::vector<Tensor> compute_concat(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::concat(in, c.attrs.get_int("axis"))};
}

std::vector<ValueInfo> infer_split(const InferContext& c) {
  expect_arity(c, 1, 1);
  const SymShape& s = c.inputs[0].shape;
  const int ax = axis_of(c, c.attrs.get_int("axis"), s.size());
  const auto& sizes = c.attrs.get_ints("sizes");
  const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  if (s[static_cast<std::size_t>(ax)] != SymDim(total))
    shape_error(c, "sizes " + shape_str(sizes) + " sum to " + std::to_string(total) + " but dim " + std::to_string(ax) +
                       " is " + s[static_cast<std::size_t>(ax)].str());
  std::vector<ValueInfo> outs;
  for (auto n : sizes) {
    if (n < 0) shape_error(c, "negative split size " + std::to_string(n));
    SymShape o = s;
    o[static_cast<std::size_t>(ax)] = n;
    outs.push_back(ValueInfo{c.inputs[0].dtype, o});
  }
  return outs;
}

std::vector<Var> grad_split(const GradContext& c) {
  std::vector<Var> parts;
  for (std::size_t i = 0; i < c.outputs.size(); ++i) parts.push_back(c.grad_output(i));
  return {concat(parts, c.attrs.get_int("axis"))};
}

std::vector<Tensor> compute_split(const std::vector<Tensor>& in, const ComputeContext& c) {
  return kernels::split(in[0], c.attrs.get_ints("sizes"), c.attrs.get_int("axis"));
}

template <bool Shuffle>
std::vector<ValueInfo> infer_pixel_shuffle(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_rank(c, 0, 4, "NCHW");
  const std::int64_t r = c.attrs.get_int("r");
  if (r < 1) shape_error(c, "factor must be >= 1, got " + std::to_string(r));
  SymShape s = c.inputs[0].shape;
  if (Shuffle) {
    auto ch = s[1].divide(r * r);
    if (!ch) shape_error(c, "channels " + s[1].str() + " are not a multiple of r*r = " + std::to_string(r * r));
    s = {s[0], *ch, s[2] * r, s[3] * r};
  } else {
    auto h = s[2].divide(r), w = s[3].divide(r);
    if (!h || !w) shape_error(c, "height and width must be multiples of r = " + std::to_string(r));
    s = {s[0], s[1] * (r * r), *h, *w};
  }
  return one(c.inputs[0].dtype, s);
}

std::vector<Tensor> compute_pixel_shuffle(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::pixel_shuffle(in[0], c.attrs.get_int("r"))};
}
std::vector<Tensor> compute_pixel_unshuffle(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::pixel_unshuffle(in[0], c.attrs.get_int("r"))};
}

std::vector<ValueInfo> infer_cast(const InferContext& c) {
  expect_arity(c, 1, 1);
  return one(static_cast<DType>(c.attrs.get_int("dtype")), c.inputs[0].shape);
}
std::vector<Tensor> compute_cast(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {in[0].to(static_cast<DType>(c.attrs.get_int("dtype")))};
}

std::vector<ValueInfo> infer_identity(const InferContext& c) {
  expect_arity(c, 1, 1);
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}
std::vector<Tensor> compute_identity(const std::vector<Tensor>& in, const ComputeContext&) { return {in[0]}; }
std::vector<Tensor> compute_zeros_like(const std::vector<Tensor>& in, const ComputeContext&) {
  return {Tensor::zeros(in[0].shape(), in[0].dtype(), in[0].device())};
}

// Sharding of reshape: a split of input dim d is the split of output dim e when the dims before
// them hold as many elements (so are their suffixes): n equal slices of either are then the same
// contiguous runs of the flat data. Partial sums pass through.
std::vector<ShardSignature> shard_reshape(const ShardContext& c) {
  const SymShape &x = c.inputs[0].shape, &y = c.outputs[0].shape;
  std::vector<ShardSignature> out;
  SymDim before_x(1);
  for (std::size_t d = 0; d < x.size(); before_x = before_x * x[d], ++d) {
    if (x[d].is_static() && x[d].size() == 1) continue;
    SymDim before_y(1);
    for (std::size_t e = 0; e < y.size(); before_y = before_y * y[e], ++e)
      if (before_y == before_x && !(y[e].is_static() && y[e].size() == 1)) {
        out.push_back({{Placement::split(static_cast<int>(d))}, {Placement::split(static_cast<int>(e))}});
        break;
      }
  }
  out.push_back({{Placement::partial_sum()}, {Placement::partial_sum()}});
  // A split in blocks (Placement::blocks) keeps them where its dim itself is unchanged.
  const Placement& now = c.current[0];
  if (now.kind == Placement::Kind::split && now.blocks > 1) {
    SymDim before(1);
    for (int d = 0; d < now.dim; ++d) before = before * x[static_cast<std::size_t>(d)];
    SymDim before_y(1);
    for (std::size_t e = 0; e < y.size(); before_y = before_y * y[e], ++e)
      if (before_y == before && y[e] == x[static_cast<std::size_t>(now.dim)]) {
        out.push_back({{now}, {Placement::split(static_cast<int>(e), now.blocks)}});
        break;
      }
  }
  return out;
}
// Sharding of split and concat: any dim but the one they cut or join, every piece split alike;
// partial sums pass through.
std::vector<ShardSignature> shard_pieces(const ShardContext& c) {
  const auto rank = static_cast<std::int64_t>(c.inputs[0].shape.size());
  std::int64_t axis = c.attrs.get_int("axis");
  if (axis < 0) axis += rank;
  std::vector<ShardSignature> out = shard_all_but_axis(c);
  out.push_back({std::vector<Placement>(c.inputs.size(), Placement::partial_sum()),
                 std::vector<Placement>(c.outputs.size(), Placement::partial_sum())});
  // Equal pieces along the axis: each device's slices of the pieces, in order, are its slice of
  // the whole split in as many blocks (Placement::blocks), so splitting such a value, or joining
  // split pieces into one, is local.
  const auto equal = [&](const std::vector<ValueInfo>& pieces) {
    for (const ValueInfo& p : pieces)
      if (p.shape[static_cast<std::size_t>(axis)] != pieces[0].shape[static_cast<std::size_t>(axis)]) return false;
    return pieces.size() > 1;
  };
  const int ax = static_cast<int>(axis), k = static_cast<int>(c.op == "split" ? c.outputs.size() : c.inputs.size());
  if (c.op == "split" && equal(c.outputs))
    out.push_back({{Placement::split(ax, k)}, std::vector<Placement>(c.outputs.size(), Placement::split(ax))});
  if (c.op == "concat" && equal(c.inputs))
    out.push_back({std::vector<Placement>(c.inputs.size(), Placement::split(ax)), {Placement::split(ax, k)}});
  return out;
}
// Sharding of zeros_like: split like its input; zeros of a partial sum's full shape are zeros everywhere.
std::vector<ShardSignature> shard_zeros_like(const ShardContext& c) {
  std::vector<ShardSignature> out = shard_pointwise(c);
  out.push_back({{Placement::partial_sum()}, {Placement::broadcast()}});
  return out;
}
// Sharding of permute: output dim j is input dim dims[j]; partial sums pass through.
std::vector<ShardSignature> shard_permute(const ShardContext& c) {
  const auto& dims = c.attrs.get_ints("dims");
  const auto rank = static_cast<std::int64_t>(dims.size());
  std::vector<ShardSignature> out;
  for (std::int64_t j = 0; j < rank; ++j) {
    const std::int64_t d = dims[static_cast<std::size_t>(j)] < 0 ? dims[static_cast<std::size_t>(j)] + rank : dims[static_cast<std::size_t>(j)];
    out.push_back({{Placement::split(static_cast<int>(d))}, {Placement::split(static_cast<int>(j))}});
  }
  out.push_back({{Placement::partial_sum()}, {Placement::partial_sum()}});
  return out;
}

}  // namespace

// reshape, transpose and permute are views when the layout allows.
Var reshape(const Var& x, const SymShape& shape) { return apply1("reshape", {x}, {}, shape); }
TROUPE_DEFINE_OP({.name = "reshape", .infer = infer_reshape, .cost = moves_only, .sharding = shard_reshape, .compute = compute_reshape,
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {reshape(c.grad_output(0), c.inputs[0].shape())};
                  }});

Var permute(const Var& x, const std::vector<std::int64_t>& dims) {
  return apply1("permute", {x}, Attrs().set("dims", dims));
}
TROUPE_DEFINE_OP({.name = "permute", .infer = infer_permute, .cost = moves_only, .sharding = shard_permute, .compute = compute_permute,
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {permute(c.grad_output(0), inverse_permutation(c.attrs.get_ints("dims")))};
                  }});
Var transpose(const Var& x, std::int64_t a, std::int64_t b) {
  const auto rank = static_cast<std::size_t>(x.dim());
  std::vector<std::int64_t> dims(rank);
  for (std::size_t i = 0; i < rank; ++i) dims[i] = static_cast<std::int64_t>(i);
  std::swap(dims.at(static_cast<std::size_t>(normalize_axis(a, rank, "transpose"))),
            dims.at(static_cast<std::size_t>(normalize_axis(b, rank, "transpose"))));
  return permute(x, dims);
}

// compute: kernels::concat (a copy); its gradient is a split.
Var concat(const std::vector<Var>& xs, std::int64_t axis) { return apply1("concat", xs, Attrs().set("axis", axis)); }
TROUPE_DEFINE_OP({.name = "concat", .infer = infer_concat, .cost = moves_only, .sharding = shard_pieces, .compute = compute_concat, .grad = grad_concat});

// compute: kernels::split (views); its gradient is a concat.
std::vector<Var> split(const Var& x, const std::vector<std::int64_t>& sizes, std::int64_t axis) {
  return apply("split", {x}, Attrs().set("sizes", sizes).set("axis", axis));
}
TROUPE_DEFINE_OP({.name = "split", .infer = infer_split, .cost = moves_only, .sharding = shard_pieces, .compute = compute_split, .grad = grad_split});

// compute: kernels::pixel_shuffle / pixel_unshuffle (copies); each is the other's gradient.
Var pixel_shuffle(const Var& x, std::int64_t r) { return apply1("pixel_shuffle", {x}, Attrs().set("r", r)); }
TROUPE_DEFINE_OP({.name = "pixel_shuffle", .infer = infer_pixel_shuffle<true>, .cost = moves_only, .compute = compute_pixel_shuffle,
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {pixel_unshuffle(c.grad_output(0), c.attrs.get_int("r"))};
                  }});
Var pixel_unshuffle(const Var& x, std::int64_t r) { return apply1("pixel_unshuffle", {x}, Attrs().set("r", r)); }
TROUPE_DEFINE_OP({.name = "pixel_unshuffle", .infer = infer_pixel_shuffle<false>, .cost = moves_only, .compute = compute_pixel_unshuffle,
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {pixel_shuffle(c.grad_output(0), c.attrs.get_int("r"))};
                  }});

// compute: Tensor::to (a converting copy).
Var cast(const Var& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return apply1("cast", {x}, Attrs().set("dtype", static_cast<std::int64_t>(dtype)));
}
TROUPE_DEFINE_OP({.name = "cast", .infer = infer_cast, .cost = moves_only, .sharding = shard_linear_in_first, .compute = compute_cast,
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    if (!is_floating(c.inputs[0].dtype())) return {Var()};
                    return {cast(c.grad_output(0), c.inputs[0].dtype())};
                  }});

// identity has no builder of its own: the runtime's benchmarks and tests use it as an empty op.
TROUPE_DEFINE_OP({.name = "identity", .infer = infer_identity, .cost = moves_only, .sharding = shard_linear_in_first, .compute = compute_identity,
                  .grad = [](const GradContext& c) -> std::vector<Var> { return {c.grad_output(0)}; }});
// after(x, token) is x, once token exists: an order among nodes that data alone does not give. The
// recomputation pass makes a recomputed value wait, through it, for the backward to reach its
// reader, so the actor runtime (which runs a node as soon as its inputs exist) does not recompute it
// during the forward. x passes through as the same tensor; token is only waited for.
std::vector<ValueInfo> infer_after(const InferContext& c) {
  expect_arity(c, 2, 2);
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}
TROUPE_DEFINE_OP({.name = "after", .infer = infer_after, .cost = moves_only, .compute = compute_identity,
                  .grad = [](const GradContext& c) -> std::vector<Var> { return {c.grad_output(0), Var()}; },
                  .no_grad_inputs = {1}});
// Input 0 takes no gradient, so neither the tape nor autodiff go through stop_gradient.
Var stop_gradient(const Var& x) { return apply1("stop_gradient", {x}); }
TROUPE_DEFINE_OP({.name = "stop_gradient", .infer = infer_identity, .cost = moves_only, .compute = compute_identity, .no_grad_inputs = {0}});
Var zeros_like(const Var& x) { return apply1("zeros_like", {x}); }
TROUPE_DEFINE_OP({.name = "zeros_like", .infer = infer_identity, .cost = moves_only, .sharding = shard_zeros_like, .compute = compute_zeros_like, .no_grad_inputs = {0}});

}  // namespace troupe::graph
