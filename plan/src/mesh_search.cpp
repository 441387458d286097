// The planner's search over a job's meshes (troupe/plan/mesh_search.hpp).
#include "troupe/plan/mesh_search.hpp"

#include <algorithm>

#include <map>

#include "troupe/kernels/error.hpp"
#include "troupe/plan/pipeline_cost.hpp"
#include "troupe/plan/propagation.hpp"

namespace troupe::plan {

namespace {

// The pipelined candidate dp x tp x pp (pp > 1) of `q`, from each stage's step in `steps`; throws
// when a stage does not fit the mesh (a batch dp does not divide).
MeshCandidate pipelined(const MeshSearch& q, int dp, int tp, const std::vector<graph::TracedFunction>& steps) {
  const int pp = static_cast<int>(steps.size());
  // One micro-batch: a replica's rows of every batch dim, split in micro_batches (the largest part).
  graph::SymBindings rows = q.bindings;
  std::int64_t replica = 1;
  for (auto& [symbol, size] : rows) {
    TROUPE_CHECK(size % dp == 0, invalid_argument, "the batch's ", size, " rows do not split among ", dp, " replicas");
    replica = size / dp;
  }
  const int m = static_cast<int>(std::clamp<std::int64_t>(q.micro_batches, 1, replica));
  for (auto& [symbol, size] : rows) size = (size / dp + m - 1) / m;
  const graph::Mesh mesh = job_mesh(dp, tp, dp * tp);
  std::vector<StageCost> stages;
  for (int s = 0; s < pp; ++s) {
    const graph::TracedFunction& step = steps[static_cast<std::size_t>(s)];
    const auto [tp_mesh, along_tp] = project_request(q.policy.place(step, mesh, q.zero1), mesh, "tp");
    stages.push_back(stage_cost(step, propagate_sharding(step.graph(), tp_mesh, along_tp.given, along_tp.required, rows), rows,
                                q.cost, dp, std::min(m, pp - s), q.optimizer_bytes_per_parameter));
  }
  const PipelineCost p = pipeline_cost(stages, m);
  MeshCandidate c;
  c.dp = dp;
  c.tp = tp;
  c.pp = pp;
  double tail = 0;
  for (const StageCost& st : p.stages) tail = std::max(tail, st.gradient_sync + st.optimizer);
  c.time.compute = p.step - tail;
  c.time.optimizer = tail;
  c.bubble = p.bubble;
  const auto fullest = std::max_element(p.stages.begin(), p.stages.end(), [](const StageCost& a, const StageCost& b) {
    return a.peak_bytes() < b.peak_bytes();
  });
  c.memory = fullest->memory;
  c.memory.activations *= fullest->in_flight;
  return c;
}

}  // namespace

std::vector<MeshCandidate> search_meshes(const MeshSearch& q) {
  const graph::TracedFunction& step = q.step;
  const int world = q.world;
  TROUPE_CHECK(world >= 1, invalid_argument, "planner: a job of ", world, " devices; give at least 1");
  std::vector<MeshCandidate> all;
  std::string unplaceable;  // why meshes were left out
  const auto consider = [&](auto&& make) {
    try {
      MeshCandidate c = make();
      c.fits = q.memory_budget <= 0 || c.memory.total() <= q.memory_budget;
      all.push_back(c);
    } catch (const Error& e) {  // this mesh does not fit the step (a batch dp does not divide): not a candidate
      unplaceable += (unplaceable.empty() ? "" : "; ") + e.message();
    }
  };
  std::map<int, std::vector<graph::TracedFunction>> stage_steps;  // by stage count
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0 || (q.policy.splits && !q.policy.splits(tp))) continue;
    consider([&] {
      MeshCandidate c;
      c.tp = tp;
      c.dp = world / tp;
      const graph::Mesh mesh = job_mesh(c.dp, c.tp, world);
      const PlacementRequest r = q.policy.place(step, mesh, q.zero1);
      const graph::GraphPlacement plan = propagate_sharding(step.graph(), mesh, r.given, r.required, q.bindings);
      c.time = step_time(step, plan, q.bindings, q.cost);
      c.memory = device_memory(step, plan, q.bindings, q.optimizer_bytes_per_parameter);
      return c;
    });
    for (int pp = 2; q.stages.forward && pp <= q.stages.layers && pp <= world / tp; ++pp) {
      if (world % (tp * pp) != 0) continue;
      auto& steps = stage_steps[pp];
      if (steps.empty()) steps = trace_stage_steps(q.stages, stage_layers(q.stages.layers, pp), q.signature);
      consider([&] { return pipelined(q, world / (tp * pp), tp, steps); });
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const MeshCandidate& a, const MeshCandidate& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits ? a.time.total() < b.time.total() : a.memory.total() < b.memory.total();
  });
  if (all.empty() || !all.front().fits) {
    TROUPE_CHECK(!all.empty(), invalid_argument, "planner: no dp x tp of ", world, " devices that the ", q.policy.name,
                 " placement can split the model over places the step", unplaceable.empty() ? "" : " (" + unplaceable + ")");
    fail(ErrorKind::invalid_argument, "planner: no mesh of ", world, " devices fits ", q.memory_budget / (1 << 20),
         " MiB per device; the smallest needs ", all.front().memory.total() / (1 << 20), " MiB (dp=", all.front().dp,
         " x tp=", all.front().tp, all.front().pp > 1 ? " x pp=" + std::to_string(all.front().pp) : std::string(),
         "); raise the memory budget (--mem-per-rank) or use more devices");
  }
  return all;
}

}  // namespace troupe::plan
