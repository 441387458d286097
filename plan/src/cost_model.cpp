// The planner's cost and memory model (troupe/plan/cost_model.hpp).
#include <algorithm>
#include <map>
#include <set>

#include "troupe/plan/cost_model.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::plan {

using graph::NdPlacement;
using graph::ValueId;


StepTime step_time(const graph::TracedFunction& step, const graph::GraphPlacement& plan, const graph::SymBindings& bindings,
                   const CostModel& cost) {
  const graph::Graph& g = step.graph();
  StepTime t;
  for (const graph::Node& node : g.nodes()) {
    double devices = 1;  // that share the node's work: the axes its signature splits something along
    const std::vector<graph::ShardSignature>& sigs = plan.signatures.at(node.id);
    for (std::size_t a = 0; a < sigs.size(); ++a) {
      bool split = false;
      for (const graph::Placement& p : sigs[a].inputs) split |= p.kind == graph::Placement::Kind::split;
      for (const graph::Placement& p : sigs[a].outputs) split |= p.kind == graph::Placement::Kind::split;
      if (split) devices *= plan.mesh.axes[a].second;
    }
    t.compute += graph::op_cost(g, node, bindings) / (cost.gflops * 1e9) / devices;
  }
  const auto measured = cost.mesh_links.find(plan.mesh.str());
  const auto send = [&](std::size_t axis, double bytes) {
    const std::string& name = plan.mesh.axes[axis].first;
    const CostModel::Link* link = &cost.default_link;
    if (const auto it = cost.links.find(name); it != cost.links.end()) link = &it->second;
    if (measured != cost.mesh_links.end())
      if (const auto it = measured->second.find(name); it != measured->second.end()) link = &it->second;
    t.communication += link->latency_us * 1e-6 + bytes / (link->gbytes_per_s * 1e9);
  };
  for (const graph::Transition& tr : plan.transitions)
    if (tr.collective != graph::Collective::local) send(static_cast<std::size_t>(tr.mesh_axis), tr.bytes);
  // An expanded op's own collectives (the vocab-parallel cross-entropy's maxima and sums) carry a
  // few bytes a row: their latency counts.
  for (const auto& [node, sigs] : plan.signatures)
    for (std::size_t a = 0; a < sigs.size(); ++a)
      if (sigs[a].expand && plan.mesh.axes[a].second > 1)
        for (int k = 0; k < sigs[a].expand_collectives; ++k) send(a, 0);
  // The optimizer updates the gradient elements the device holds once the plan is done (a shard with ZeRO-1).
  const std::map<graph::ValueId, graph::NdPlacement> done = plan.final_placements();
  for (std::size_t k = step.output_count(); k < g.outputs().size(); ++k) {
    const graph::Value& grad = g.value(g.outputs()[k]);
    const double elements = graph::held_bytes(bind(grad.info.shape, bindings), grad.info.dtype, done.at(grad.id), plan.mesh) /
                            static_cast<double>(dtype_size(grad.info.dtype));
    t.optimizer += elements * cost.update_bytes_per_element / (cost.update_gbps * 1e9);
  }
  // ZeRO-1: a parameter whose gradient the device holds a shard of (split where the parameter is
  // not) is all-gathered after its update.
  for (std::size_t k = 0; k < step.gradient_parameters().size(); ++k) {
    const graph::ValueId param = g.parameters()[step.gradient_parameters()[k]];
    const graph::NdPlacement &held = done.at(g.outputs()[step.output_count() + k]), &whole = plan.placements.at(param);
    for (std::size_t a = 0; a < held.size(); ++a) {
      if (held[a].kind != graph::Placement::Kind::split || whole[a] == held[a] || plan.mesh.axes[a].second == 1) continue;
      const double bytes = graph::held_bytes(bind(g.value(param).info.shape, bindings), g.value(param).info.dtype, whole,
                                             plan.mesh, static_cast<int>(a));
      send(a, graph::collective_bytes(graph::Collective::all_gather, bytes, plan.mesh.axes[a].second));
    }
  }
  return t;
}

namespace {

// The bytes device 0 holds of `v` placed `p`.
double held_bytes(const graph::Graph& g, ValueId v, const NdPlacement& p, const graph::Mesh& mesh,
                  const graph::SymBindings& bindings) {
  return graph::held_bytes(bind(g.value(v).info.shape, bindings), g.value(v).info.dtype, p, mesh);
}

}  // namespace

DeviceMemory device_memory(const graph::TracedFunction& step, const graph::GraphPlacement& plan, const graph::SymBindings& bindings,
                       double optimizer_bytes_per_parameter) {
  const graph::Graph& g = step.graph();
  const std::map<ValueId, NdPlacement> final = plan.final_placements();
  DeviceMemory m;
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

}  // namespace troupe::plan
