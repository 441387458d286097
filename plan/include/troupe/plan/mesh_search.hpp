#pragma once
// The planner's search: every dp x tp mesh of a job's devices that a model's placement policy
// allows, each placed, costed and sized, fastest first among those that fit the memory budget.

#include <vector>

#include "troupe/plan/cost_model.hpp"
#include "troupe/plan/placement.hpp"

namespace troupe::plan {

/// One mesh the planner tried for a GPT step, with what it predicts.
struct MeshCandidate {
  int dp = 1, tp = 1;
  StepTime time;
  DeviceMemory memory;
  bool fits = true;  // within the memory budget
};

/// What the search is asked: a training step, the devices, the model's policy and the budget.
struct MeshSearch {
  graph::TracedFunction step;                // a training step (with gradients)
  int world = 1;                             // devices to place it on
  PlacementPolicy policy;                    // the model's placement rules
  graph::SymBindings bindings;               // sizes of the symbolic dims (the global batch)
  CostModel cost;
  double memory_budget = 0;                  // bytes per device; 0: none
  double optimizer_bytes_per_parameter = 8;  // AdamW's two f32 moments
  bool zero1 = false;                        // ZeRO-1 on the dp axis
};

/// Every dp x tp = world mesh with tp allowed by the policy whose placements fit the step (dp
/// dividing the batch), each planned and predicted; returns them all, fastest first among those
/// whose memory fits the budget, then the rest. Throws when none fits, naming the smallest memory
/// a mesh needs.
std::vector<MeshCandidate> search_meshes(const MeshSearch& question);

}  // namespace troupe::plan
