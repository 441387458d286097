// The embedding op: rows of a table picked by integer ids, with its backward op and their
// sharding rules (Megatron's vocab-parallel embedding among them).
#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/embedding.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

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
}  // namespace
// compute: kernels::embedding; the ids (input 1) take no gradient.
Var embedding(const Var& weight, const Var& ids) { return apply1("embedding", {weight, ids}); }
TROUPE_DEFINE_OP({.name = "embedding", .infer = infer_embedding, .sharding = shard_embedding, .compute = compute_embedding, .grad = grad_embedding,
                  .no_grad_inputs = {1}, .host_reads = true, .precision = Precision::keeps_f32});
TROUPE_DEFINE_OP({.name = "embedding_backward", .infer = infer_embedding_backward, .sharding = shard_embedding_backward, .compute = compute_embedding_backward,
                  .no_grad_inputs = {1}, .host_reads = true});

}  // namespace troupe::graph
