// Megatron's vocab-parallel embedding and cross-entropy: what the embedding ops and the
// cross-entropy ops run as on a device that holds a slice of the vocabulary (their signatures'
// ShardSignature::expand, graph/sharding.hpp), and the local ops of the cross-entropy. The logits
// are never gathered: the devices exchange each row's maximum and two sums.
#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/loss.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

// The rows' maximum over every device's columns of the local logits [..., C_l]: [...].
ValueId row_max(LocalGraph& g, ValueId logits) {
  const auto last = static_cast<std::int64_t>(g.info(logits).shape.size()) - 1;
  const ValueId mine = g.add("max", {logits}, Attrs().set("axes", std::vector<std::int64_t>{last}).set("keepdim", std::int64_t{1}))[0];
  const ValueId all = g.all_gather(mine, static_cast<int>(last));
  return g.add("max", {all}, Attrs().set("axes", std::vector<std::int64_t>{last}).set("keepdim", std::int64_t{0}))[0];
}

// The attributes of the ops that read a device's columns of the logits [..., C_l]: its first
// column, and the classes of all devices.
Attrs columns_attrs(LocalGraph& g, ValueId logits) {
  const std::int64_t held = g.info(logits).shape.back().size();
  return Attrs().set("first", g.index() * held).set("classes", held * g.devices());
}

// Each row's parts (graph input order: logits, targets), summed over the devices.
ValueId summed_parts(LocalGraph& g, ValueId logits, ValueId targets, ValueId max) {
  return g.all_reduce(g.add("cross_entropy_parts", {logits, targets, max}, columns_attrs(g, logits))[0]);
}

std::vector<ValueInfo> infer_parts(const InferContext& c) {
  expect_arity(c, 3, 3);
  expect_floating(c, 0);
  expect_integer(c, 1);
  const SymShape& l = c.inputs[0].shape;
  const SymShape rows(l.begin(), l.end() - (l.empty() ? 0 : 1));
  if (l.empty() || c.inputs[1].shape != rows || c.inputs[2].shape != rows || c.inputs[2].dtype != c.inputs[0].dtype)
    shape_error(c, "expected logits [..., classes], targets [...] and the rows' maximum [...] in the logits' dtype");
  SymShape out = rows;
  out.push_back(SymDim(2));
  return one(DType::f64, out);
}

Tensor parts_rows(const Tensor& parts) { return parts.reshape({parts.numel() / 2, 2}); }

std::vector<Tensor> compute_parts(const std::vector<Tensor>& in, const ComputeContext& c) {
  const Tensor parts = kernels::cross_entropy_parts(rows_of(in[0]), flat(in[1]), flat(in[2]), c.attrs.get_int("first"),
                                                    c.attrs.get_int("classes"));
  return {parts.view(c.output_shapes[0])};
}

std::vector<ValueInfo> infer_from_parts(const InferContext& c) {
  expect_arity(c, 2, 2);
  if (c.inputs[0].dtype != DType::f64 || c.inputs[0].shape.empty() || c.inputs[0].shape.back() != SymDim(2))
    shape_error(c, "expected the rows' parts f64 [..., 2] and their maximum [...]");
  return one(accumulation_dtype(c.inputs[1].dtype), {});
}

std::vector<Tensor> compute_from_parts(const std::vector<Tensor>& in, const ComputeContext& c) {
  return {kernels::cross_entropy_from_parts(parts_rows(in[0]), c.output_dtypes[0])};
}

std::vector<ValueInfo> infer_parts_backward(const InferContext& c) {
  expect_arity(c, 5, 5);
  return one(c.inputs[1].dtype, c.inputs[1].shape);
}

std::vector<Tensor> compute_parts_backward(const std::vector<Tensor>& in, const ComputeContext& c) {
  const Tensor g = kernels::cross_entropy_parts_backward(in[0], rows_of(in[1]), flat(in[2]), flat(in[3]), parts_rows(in[4]),
                                                         c.attrs.get_int("first"), c.attrs.get_int("classes"));
  return {g.view(in[1].shape())};
}

}  // namespace

namespace detail {

std::vector<ValueId> expand_vocab_embedding(LocalGraph& g, const std::vector<ValueId>& in, const Attrs& attrs) {
  const std::int64_t rows = g.info(in[0]).shape.at(0).size();
  return g.add("embedding", in, Attrs(attrs).set("first", g.index() * rows).set("table", rows * g.devices()));
}

std::vector<ValueId> expand_vocab_embedding_backward(LocalGraph& g, const std::vector<ValueId>& in, const Attrs& attrs) {
  const std::int64_t table = attrs.get_int("num"), rows = table / g.devices();
  return g.add("embedding_backward", in, Attrs(attrs).set("num", rows).set("first", g.index() * rows).set("table", table));
}

std::vector<ValueId> expand_vocab_cross_entropy(LocalGraph& g, const std::vector<ValueId>& in, const Attrs&) {
  const ValueId max = row_max(g, in[0]);
  return g.add("cross_entropy_from_parts", {summed_parts(g, in[0], in[1], max), max}, {});
}

std::vector<ValueId> expand_vocab_cross_entropy_backward(LocalGraph& g, const std::vector<ValueId>& in, const Attrs&) {
  const ValueId max = row_max(g, in[1]);
  return g.add("cross_entropy_parts_backward", {in[0], in[1], in[2], max, summed_parts(g, in[1], in[2], max)},
               columns_attrs(g, in[1]));
}

}  // namespace detail

// A device's parts of the cross-entropy of its columns of the logits (kernels::cross_entropy_parts;
// attributes "first", the device's first column, and "classes"): (logits [..., C_l], targets, the
// rows' maximum over all devices) -> f64 [..., 2].
TROUPE_DEFINE_OP({.name = "cross_entropy_parts", .infer = infer_parts, .compute = compute_parts, .no_grad_inputs = {0, 1, 2}, .host_reads = true});
// The loss from the parts summed over the devices: (parts, maximum) -> the mean over the rows.
TROUPE_DEFINE_OP({.name = "cross_entropy_from_parts", .infer = infer_from_parts, .compute = compute_from_parts,
                  .no_grad_inputs = {0, 1}});
// The gradient of a device's columns: (dloss, logits, targets, maximum, summed parts) -> dlogits.
TROUPE_DEFINE_OP({.name = "cross_entropy_parts_backward", .infer = infer_parts_backward, .compute = compute_parts_backward,
                  .no_grad_inputs = {0, 1, 2, 3, 4}, .host_reads = true});

}  // namespace troupe::graph
