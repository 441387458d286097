// The planner's cost model and its search over meshes (troupe/actors/planning.hpp).
#include <algorithm>
#include <map>
#include <set>

#include "troupe/actors/planning.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::actors {

PlanTime plan_time(const graph::TracedFunction& step, const graph::ShardingPlan& plan, const graph::SymBindings& bindings,
                   const CostModel& cost) {
  const graph::Graph& g = step.graph();
  PlanTime t;
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

std::vector<MeshCandidate> search_gpt_meshes(const graph::TracedFunction& step, int world, std::int64_t heads,
                                             const graph::SymBindings& bindings, const CostModel& cost,
                                             double memory_budget, double optimizer_bytes_per_parameter, bool zero1) {
  TROUPE_CHECK(world >= 1, invalid_argument, "planner: a job of ", world, " devices; give at least 1");
  std::vector<MeshCandidate> all;
  std::string unplaceable;  // why meshes were left out
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0 || heads % tp != 0) continue;
    MeshCandidate c;
    c.tp = tp;
    c.dp = world / tp;
    const graph::Mesh mesh = job_mesh(c.dp, c.tp, world);
    const PlacementRequest r = megatron_gpt_placement(step, mesh, heads, zero1);
    graph::ShardingPlan plan;
    try {
      plan = propagate_sharding(step.graph(), mesh, r.given, r.required, bindings);
    } catch (const Error& e) {  // this mesh does not fit the step (a batch dp does not divide): not a candidate
      unplaceable += (unplaceable.empty() ? "" : "; ") + e.message();
      continue;
    }
    c.time = plan_time(step, plan, bindings, cost);
    c.memory = plan_memory(step, plan, bindings, optimizer_bytes_per_parameter);
    c.fits = memory_budget <= 0 || c.memory.total() <= memory_budget;
    all.push_back(c);
  }
  std::stable_sort(all.begin(), all.end(), [](const MeshCandidate& a, const MeshCandidate& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits ? a.time.total() < b.time.total() : a.memory.total() < b.memory.total();
  });
  if (all.empty() || !all.front().fits) {
    TROUPE_CHECK(!all.empty(), invalid_argument, "planner: no dp x tp of ", world, " devices has tp dividing the ", heads,
                 " heads and places the step", unplaceable.empty() ? "" : " (" + unplaceable + ")");
    fail(ErrorKind::invalid_argument, "planner: no mesh of ", world, " devices fits ", memory_budget / (1 << 20),
         " MiB per device; the smallest needs ", all.front().memory.total() / (1 << 20), " MiB (dp=", all.front().dp,
         " x tp=", all.front().tp, "); raise --mem-per-rank or use more devices");
  }
  return all;
}

}  // namespace troupe::actors
