#pragma once
// The planner's search: every dp x tp mesh of a job's devices that a model's placement policy
// allows, and with the model's split into stages every dp x tp x pp one, each placed, costed and
// sized, fastest first among those that fit the memory budget.

#include <vector>

#include "troupe/plan/cost_model.hpp"
#include "troupe/plan/placement.hpp"
#include "troupe/plan/stages.hpp"

namespace troupe::plan {

/// One mesh the planner tried for a GPT step, with what it predicts.
struct MeshCandidate {
  int dp = 1, tp = 1, pp = 1;
  /// The step; with pp > 1 the pipeline's (pipeline_cost.hpp): `compute` its micro-batches' part
  /// (their compute, tp's collectives and the sends, (m + p - 1) slots of the slowest stage),
  /// `optimizer` the slowest stage's update and dp all-reduce.
  StepTime time;
  DeviceMemory memory;  // with pp > 1 the fullest stage's, its micro-batches in flight's activations in `activations`
  bool fits = true;     // within the memory budget
  double bubble = 0;    // pp > 1: the predicted idle part of the micro-batches' part
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
  /// The model's split into stages: with it (and signature, its batch inputs) meshes with pp > 1
  /// are tried too, each stage's step placed on its dp x tp, `micro_batches` a replica (at most
  /// its rows, for every symbol of `bindings`: the batch's dims), 1F1B's micro-batches in flight.
  StagePolicy stages;
  std::vector<graph::InputSpec> signature;
  int micro_batches = 1;
};

/// Every dp x tp = world mesh with tp allowed by the policy whose placements fit the step (dp
/// dividing the batch), and with stages every dp x tp x pp = world one (pp from 2 to the layers,
/// split evenly), each planned and predicted; returns them all, fastest first among those whose
/// memory fits the budget, then the rest. Throws when none fits, naming the smallest memory a mesh
/// needs.
std::vector<MeshCandidate> search_meshes(const MeshSearch& question);

}  // namespace troupe::plan
