// Megatron's placement of a GPT training step (troupe/models/gpt_placement.hpp).
#include "troupe/models/gpt_placement.hpp"

#include <set>
#include <string>
#include <vector>

#include "troupe/kernels/error.hpp"

namespace troupe::models {

using graph::NdPlacement;
using graph::Placement;
using graph::SymShape;
using graph::ValueId;
using plan::PlacementRequest;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A language model's tables over the vocabulary in a traced step: the token embedding (the table
// of a lookup of a step input), its lookup's output, and the head (the weight of the product whose
// output, reshaped or not, is the cross-entropy's logits); -1 where absent.
struct VocabTables {
  ValueId embedding = -1, lookup = -1, head = -1;
};
// `v`, or the value it is a cast of (mixed precision casts the weights and activations an op reads).
ValueId uncast(const graph::Graph& g, ValueId v) {
  while (g.value(v).producer >= 0 && g.node(g.value(v).producer).op == "cast") v = g.node(g.value(v).producer).inputs[0];
  return v;
}

VocabTables vocab_tables(const graph::Graph& g) {
  VocabTables t;
  const auto is_input = [&](ValueId v) { return g.value(uncast(g, v)).kind == graph::ValueKind::input; };
  const auto is_parameter = [&](ValueId v) { return g.value(uncast(g, v)).kind == graph::ValueKind::parameter; };
  for (const graph::Node& node : g.nodes()) {
    if (node.backward) continue;
    if (node.op == "embedding" && t.embedding < 0 && is_parameter(node.inputs[0]) && is_input(node.inputs[1])) {
      t.embedding = uncast(g, node.inputs[0]);
      t.lookup = node.outputs[0];
    }
    if (node.op != "cross_entropy" || t.head >= 0) continue;
    graph::NodeId n = g.value(uncast(g, node.inputs[0])).producer;
    while (n >= 0 && g.node(n).op == "reshape") n = g.value(uncast(g, g.node(n).inputs[0])).producer;
    if (n >= 0 && g.node(n).op == "matmul" && g.node(n).inputs.size() == 2 && is_parameter(g.node(n).inputs[1]) &&
        g.node(n).attrs.has("trans_b") && g.node(n).attrs.get_int("trans_b") != 0)
      t.head = uncast(g, g.node(n).inputs[1]);
  }
  return t;
}


}  // namespace

PlacementRequest megatron_gpt_placement(const graph::TracedFunction& step, const graph::Mesh& mesh, std::int64_t heads,
                                        bool zero1) {
  const graph::Graph& g = step.graph();
  const int dp = mesh.axis("dp"), tp = mesh.axis("tp");
  TROUPE_CHECK(dp >= 0 || tp >= 0, invalid_argument, "megatron placement: the mesh ", mesh.str(),
               " has neither a \"dp\" nor a \"tp\" axis");
  const int tp_size = tp >= 0 ? mesh.axes[static_cast<std::size_t>(tp)].second : 1;
  TROUPE_CHECK(heads % tp_size == 0, invalid_argument, "megatron placement: ", heads, " attention heads do not split among tp=",
               tp_size, " devices, and a device must own whole heads; pick a tp that divides ", heads);
  TROUPE_CHECK(step.output_count() < g.outputs().size(), invalid_argument,
               "megatron placement: the step has no gradients; trace it with_gradients()");
  // One placement per axis: `on_dp` along dp, `on_tp` along tp.
  const auto nd = [&](const Placement& on_dp, const Placement& on_tp) {
    NdPlacement p(mesh.axes.size());
    if (dp >= 0) p[static_cast<std::size_t>(dp)] = on_dp;
    if (tp >= 0) p[static_cast<std::size_t>(tp)] = on_tp;
    return p;
  };
  const Placement B = Placement::broadcast(), batch = Placement::split(0);
  const std::vector<std::pair<std::string, Placement>> tensor_parallel{
      {"attn.qkv.weight", Placement::split(0, 3)}, {"attn.qkv.bias", Placement::split(0, 3)},
      {"attn.proj.weight", Placement::split(1)},   {"mlp.fc.weight", Placement::split(0)},
      {"mlp.fc.bias", Placement::split(0)},        {"mlp.proj.weight", Placement::split(1)}};
  PlacementRequest r;
  std::set<ValueId> row_parallel, column_parallel;  // weights
  for (ValueId v : g.inputs()) r.given[v] = nd(batch, B);
  // Vocab-parallel: the token embedding and the head split by vocabulary rows where tp divides them.
  const VocabTables vocab = vocab_tables(g);
  for (ValueId v : {vocab.embedding, vocab.head}) {
    if (v < 0 || !g.value(v).info.shape[0].is_static() || g.value(v).info.shape[0].size() % tp_size != 0) continue;
    r.given[v] = nd(B, Placement::split(0));
    if (v == vocab.head) column_parallel.insert(v);
  }
  if (vocab.lookup >= 0 && r.given.count(vocab.embedding)) r.given[vocab.lookup] = nd(batch, B);  // all-reduced where looked up
  for (ValueId v : g.parameters()) {
    if (r.given.count(v)) continue;
    Placement on_tp = B;
    for (const auto& [suffix, p] : tensor_parallel)
      if (ends_with(g.value(v).name, suffix)) on_tp = p;
    if (ends_with(g.value(v).name, "attn.proj.weight") || ends_with(g.value(v).name, "mlp.proj.weight")) row_parallel.insert(v);
    if (ends_with(g.value(v).name, "attn.qkv.weight") || ends_with(g.value(v).name, "mlp.fc.weight")) column_parallel.insert(v);
    r.given[v] = nd(B, on_tp);
  }
  // Megatron's g (forward) and f (backward): all-reduced where made.
  for (const graph::Node& node : g.nodes()) {
    if (node.op != "matmul" || node.inputs.size() < 2) continue;
    const ValueId weight = uncast(g, node.inputs[1]);
    if ((!node.backward && row_parallel.count(weight)) || (node.backward && column_parallel.count(weight)))
      r.given[node.outputs[0]] = nd(batch, B);
  }
  for (std::size_t o = 0; o < step.output_count(); ++o) r.required[g.outputs()[o]] = nd(B, B);
  const int dp_size = dp >= 0 ? mesh.axes[static_cast<std::size_t>(dp)].second : 1;
  for (std::size_t k = 0; k < step.gradient_parameters().size(); ++k) {
    const ValueId param = g.parameters()[step.gradient_parameters()[k]];
    const Placement on_tp = tp >= 0 ? r.given.at(param)[static_cast<std::size_t>(tp)] : B;
    Placement on_dp = B;
    if (zero1 && dp_size > 1) {  // the first dim dp splits evenly, within tp's slices where tp splits it too
      const SymShape& shape = g.value(param).info.shape;
      for (std::size_t d = 0; d < shape.size() && on_dp.kind == Placement::Kind::broadcast; ++d) {
        const bool tp_splits = tp_size > 1 && on_tp.kind == Placement::Kind::split && on_tp.dim == static_cast<int>(d);
        if (tp_splits && on_tp.blocks > 1) continue;
        const std::int64_t parts = static_cast<std::int64_t>(dp_size) * (tp_splits ? tp_size : 1);
        if (shape[d].is_static() && shape[d].size() % parts == 0) on_dp = Placement::split(static_cast<int>(d));
      }
    }
    r.required[g.outputs()[step.output_count() + k]] = nd(on_dp, on_tp);
  }
  return r;
}

plan::PlacementPolicy megatron_gpt_policy(std::int64_t heads) {
  plan::PlacementPolicy policy;
  policy.name = "Megatron GPT";
  policy.place = [heads](const graph::TracedFunction& step, const graph::Mesh& mesh, bool zero1) {
    return megatron_gpt_placement(step, mesh, heads, zero1);
  };
  policy.splits = [heads](int tp) { return heads % tp == 0; };
  return policy;
}

}  // namespace troupe::models
