// The CAF-free planning logic of hybrid parallelism (troupe/actors/planning.hpp).
#include "troupe/actors/planning.hpp"

#include <set>
#include <vector>

#include "troupe/kernels/error.hpp"

namespace troupe::actors {

using graph::NdPlacement;
using graph::Placement;
using graph::SymShape;
using graph::ValueId;

graph::Mesh job_mesh(int dp, int tp, int world) {
  TROUPE_CHECK(dp >= 1 && tp >= 1, invalid_argument, "hybrid parallel: --dp ", dp, " and --tp ", tp,
               " must be at least 1");
  TROUPE_CHECK(dp * tp == world, invalid_argument, "hybrid parallel: --dp ", dp, " x --tp ", tp, " = ", dp * tp,
               " devices, but the job has ", world, " processes; every process must be used, so make dp x tp equal ",
               world);
  return graph::Mesh{{{"dp", dp}, {"tp", tp}}};
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The index of the mesh axis called `name`, or -1.
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

int axis_named(const graph::Mesh& mesh, const std::string& name) {
  for (std::size_t a = 0; a < mesh.axes.size(); ++a)
    if (mesh.axes[a].first == name) return static_cast<int>(a);
  return -1;
}

}  // namespace

std::pair<graph::Mesh, PlacementRequest> project_request(const PlacementRequest& request, const graph::Mesh& mesh,
                                                         const std::string& axis) {
  const int a = axis_named(mesh, axis);
  TROUPE_CHECK(a >= 0, invalid_argument, "the mesh ", mesh.str(), " has no axis '", axis, "'");
  const auto along = [a](const std::map<ValueId, NdPlacement>& in) {
    std::map<ValueId, NdPlacement> out;
    for (const auto& [v, p] : in) out[v] = {p.at(static_cast<std::size_t>(a))};
    return out;
  };
  return {graph::Mesh{{mesh.axes[static_cast<std::size_t>(a)]}}, PlacementRequest{along(request.given), along(request.required)}};
}

PlacementRequest megatron_gpt_placement(const graph::TracedFunction& step, const graph::Mesh& mesh, std::int64_t heads,
                                        bool zero1) {
  const graph::Graph& g = step.graph();
  const int dp = axis_named(mesh, "dp"), tp = axis_named(mesh, "tp");
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

namespace {

// The bytes device 0 holds of `v` placed `p`.
double held_bytes(const graph::Graph& g, ValueId v, const NdPlacement& p, const graph::Mesh& mesh,
                  const graph::SymBindings& bindings) {
  return graph::held_bytes(bind(g.value(v).info.shape, bindings), g.value(v).info.dtype, p, mesh);
}

}  // namespace

PlanMemory plan_memory(const graph::TracedFunction& step, const graph::ShardingPlan& plan, const graph::SymBindings& bindings,
                       double optimizer_bytes_per_parameter) {
  const graph::Graph& g = step.graph();
  const std::map<ValueId, NdPlacement> final = plan.final_placements();
  PlanMemory m;
  for (std::size_t p = 0; p < g.parameters().size(); ++p) {
    if (static_cast<int>(p) == step.loss_scale_parameter()) continue;
    const ValueId v = g.parameters()[p];
    m.parameters += held_bytes(g, v, final.at(v), plan.mesh, bindings);
  }
  // The optimizer keeps state for what the device updates: its gradients (a shard of them with
  // ZeRO-1, which still holds its parameters' gradients whole: their reduce-scatter writes its slice
  // into a whole buffer).
  for (std::size_t k = step.output_count(); k < g.outputs().size(); ++k) {
    const ValueId v = g.outputs()[k];
    const ValueId param = g.parameters()[step.gradient_parameters()[k - step.output_count()]];
    m.gradients += held_bytes(g, v, plan.placements.at(param), plan.mesh, bindings);
    m.optimizer_state += held_bytes(g, v, final.at(v), plan.mesh, bindings) / dtype_size(g.value(v).info.dtype) *
                         optimizer_bytes_per_parameter;
  }
  std::set<ValueId> kept;  // forward values a backward node reads
  for (const graph::Node& node : g.nodes())
    if (node.backward)
      for (ValueId v : node.inputs)
        if (g.value(v).kind == graph::ValueKind::op_output && !g.nodes()[static_cast<std::size_t>(g.value(v).producer)].backward)
          kept.insert(v);
  for (ValueId v : kept) m.activations += held_bytes(g, v, final.at(v), plan.mesh, bindings);
  return m;
}

}  // namespace troupe::actors
