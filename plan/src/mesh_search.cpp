// The planner's search over a job's meshes (troupe/plan/mesh_search.hpp).
#include "troupe/plan/mesh_search.hpp"

#include <algorithm>

#include "troupe/kernels/error.hpp"
#include "troupe/plan/propagation.hpp"

namespace troupe::plan {

std::vector<MeshCandidate> search_meshes(const MeshSearch& q) {
  const graph::TracedFunction& step = q.step;
  const int world = q.world;
  TROUPE_CHECK(world >= 1, invalid_argument, "planner: a job of ", world, " devices; give at least 1");
  std::vector<MeshCandidate> all;
  std::string unplaceable;  // why meshes were left out
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0 || (q.policy.splits && !q.policy.splits(tp))) continue;
    MeshCandidate c;
    c.tp = tp;
    c.dp = world / tp;
    const graph::Mesh mesh = job_mesh(c.dp, c.tp, world);
    const PlacementRequest r = q.policy.place(step, mesh, q.zero1);
    graph::GraphPlacement plan;
    try {
      plan = propagate_sharding(step.graph(), mesh, r.given, r.required, q.bindings);
    } catch (const Error& e) {  // this mesh does not fit the step (a batch dp does not divide): not a candidate
      unplaceable += (unplaceable.empty() ? "" : "; ") + e.message();
      continue;
    }
    c.time = step_time(step, plan, q.bindings, q.cost);
    c.memory = device_memory(step, plan, q.bindings, q.optimizer_bytes_per_parameter);
    c.fits = q.memory_budget <= 0 || c.memory.total() <= q.memory_budget;
    all.push_back(c);
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
         " x tp=", all.front().tp, "); raise the memory budget (--mem-per-rank) or use more devices");
  }
  return all;
}

}  // namespace troupe::plan
