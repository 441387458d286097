#pragma once
// The planner's model of a pipelined step (docs/PARALLELISM.md, "Pipeline parallelism"): each
// stage's share (one micro-batch's forward and backward, its sends, its update and the gradient
// all-reduce of its replicas, its memory with the micro-batches the schedule lets it hold), and
// the step they make when every micro-batch passes every stage.

#include <vector>

#include "troupe/graph/sharding.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/plan/cost_model.hpp"

namespace troupe::plan {

/// One stage of a pipeline on one device of its dp x tp group.
struct StageCost {
  StepTime micro_batch;      // one micro-batch's forward and backward: compute and tp's collectives (no update)
  double transfer = 0;       // seconds per micro-batch to send its output on and the received input's gradient back
  double optimizer = 0;      // seconds: the update of the parameters the device holds
  double gradient_sync = 0;  // seconds: the all-reduce of its gradients among the dp replicas, once a step
  DeviceMemory memory;       // the stage's parameters, gradients and optimizer state; one micro-batch's activations
  int in_flight = 1;         // micro-batches the schedule lets the stage hold
  /// What the device holds at most: its parameters, gradients and state, and in_flight micro-batches' activations.
  double peak_bytes() const;
  /// What a step allocates of it (the step memory report's measure): the gradients and in_flight
  /// micro-batches' activations.
  double step_bytes() const;
};

/// A pipelined step.
struct PipelineCost {
  std::vector<StageCost> stages;
  int micro_batches = 1;
  /// Seconds: every micro-batch passes every stage, the slowest stage (with its sends) setting the
  /// pace, (m + p - 1) of its micro-batch times; then the slowest stage's gradient all-reduce and update.
  double step = 0;
  /// The part of the step the stages idle on average in the micro-batches' part: (p - 1) / (m + p - 1)
  /// when the stages are balanced, more when they are not.
  double bubble = 0;
};

/// The cost of stage `step` (a stage's step: TracedFunction::with_stage_gradients) placed by `plan`
/// on a mesh of the stage's tp axis alone (its dp replicas are the runtime's), at `bindings` of
/// one micro-batch (its rows), on `cost`'s links ("tp", "dp", "pp"; the default where one is not
/// given), with `dp` replicas and `in_flight` micro-batches held.
StageCost stage_cost(const graph::TracedFunction& step, const graph::GraphPlacement& plan, const graph::SymBindings& bindings,
                     const CostModel& cost, int dp, int in_flight, double optimizer_bytes_per_parameter);

/// The step of `stages` with `micro_batches` micro-batches.
PipelineCost pipeline_cost(std::vector<StageCost> stages, int micro_batches);

}  // namespace troupe::plan
