#pragma once
// Where a training step's values go on a job's device mesh: the mesh of dp data-parallel replicas
// of tp tensor-parallel shards, the placements a model's policy asks for (PlacementPolicy: Megatron's
// rules for GPT live beside the GPT model, in models/gpt_placement.hpp), and a request projected on
// one mesh axis. propagate_sharding (propagation.hpp) turns a request into a GraphPlacement.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "troupe/graph/sharding.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::plan {

/// The mesh {"dp", dp} x {"tp", tp} of a job of `world` processes; every device is used
/// (fully_use_devices): dp x tp must equal the world size, or a clear error says so.
graph::Mesh job_mesh(int dp, int tp, int world);

/// The placements to hand propagate_sharding() (propagation.hpp) for a training step.
struct PlacementRequest {
  std::map<graph::ValueId, graph::NdPlacement> given;     // inputs, parameters and pinned values
  std::map<graph::ValueId, graph::NdPlacement> required;  // the step's outputs: loss and gradients
};

/// How a model's training step is placed on a mesh: its rules (Megatron's for a GPT), given to
/// the planner, to a strategy file's first run and to a tensor-parallel training.
struct PlacementPolicy {
  std::string name;  // for errors and the planner's report ("Megatron GPT")
  /// The request for `step` (a TracedFunction with gradients) on `mesh` (a "dp" and a "tp" axis);
  /// with `zero1` each gradient is required split along dp (ZeRO stage 1). Throws when the mesh
  /// does not suit the model.
  std::function<PlacementRequest(const graph::TracedFunction& step, const graph::Mesh& mesh, bool zero1)> place;
  /// Whether the model splits among `tp` tensor-parallel devices (a GPT: tp divides its heads);
  /// the planner's search tries no other.
  std::function<bool(int tp)> splits;
};

/// `request` (for `mesh`) along the mesh axis called `axis` alone, with a mesh of that axis: what a
/// device runs when the other axes are data-parallel replicas, which the runtime's data
/// parallelism joins (ProgramOptions::data_parallel). Throws when the mesh has no such axis.
std::pair<graph::Mesh, PlacementRequest> project_request(const PlacementRequest& request, const graph::Mesh& mesh,
                                                         const std::string& axis);

}  // namespace troupe::plan
