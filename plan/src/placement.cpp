// A job's mesh and a placement request projected on one of its axes (troupe/plan/placement.hpp).
#include "troupe/plan/placement.hpp"

#include "troupe/kernels/error.hpp"

namespace troupe::plan {

using graph::NdPlacement;
using graph::ValueId;

graph::Mesh job_mesh(int dp, int tp, int world) {
  TROUPE_CHECK(dp >= 1 && tp >= 1, invalid_argument, "hybrid parallel: --dp ", dp, " and --tp ", tp,
               " must be at least 1");
  TROUPE_CHECK(dp * tp == world, invalid_argument, "hybrid parallel: --dp ", dp, " x --tp ", tp, " = ", dp * tp,
               " devices, but the job has ", world, " processes; every process must be used, so make dp x tp equal ",
               world);
  return graph::Mesh{{{"dp", dp}, {"tp", tp}}};
}

std::pair<graph::Mesh, PlacementRequest> project_request(const PlacementRequest& request, const graph::Mesh& mesh,
                                                         const std::string& axis) {
  const int a = mesh.axis(axis);
  TROUPE_CHECK(a >= 0, invalid_argument, "the mesh ", mesh.str(), " has no axis '", axis, "'");
  const auto along = [a](const std::map<ValueId, NdPlacement>& in) {
    std::map<ValueId, NdPlacement> out;
    for (const auto& [v, p] : in) out[v] = {p.at(static_cast<std::size_t>(a))};
    return out;
  };
  return {graph::Mesh{{mesh.axes[static_cast<std::size_t>(a)]}}, PlacementRequest{along(request.given), along(request.required)}};
}

}  // namespace troupe::plan
