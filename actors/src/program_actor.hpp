#pragma once
// The program actor: takes run requests, starts one step at a time, collects completion, the
// outputs and failures, lets the optimizers update once the step's compute is over, and answers
// the caller. Gradients do not pass through it.

#include <caf/fwd.hpp>

#include "bucket_layout.hpp"
#include "messages.hpp"
#include "actor_graph.hpp"
#include "step_memory.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::actors {

/// What the program actor needs to know about the program it runs.
struct ProgramSetup {
  std::shared_ptr<const graph::TracedFunction> fn;
  std::shared_ptr<const ActorGraph> plan;
  int micro_batches = 1;
  double clip_grad_norm = 0;  // 0: no clipping
  ClipMode clip_mode = ClipMode::parallel;
  std::shared_ptr<graph::GradScaler> loss_scaler;  // null: the gradients are not scaled
  PeersPtr peers;
  // Data parallel (null when off): read for the time the step's collectives took, nothing else.
  std::shared_ptr<transport::Communicator> comm;
  // JIT level 3: the program's planned memory (null when the function does not plan memory).
  std::shared_ptr<StepMemory> memory;
};

/// Spawns the program actor.
ProgramActor spawn_program_actor(caf::actor_system& sys, std::shared_ptr<const ProgramSetup> setup);

/// The context of step `step` on `inputs`: split into micro-batches, parameters snapshotted, the
/// step nodes computed into `step_values` and bucket buffers taken from `bucket_buffers` (both the
/// program's, kept between steps: steps run one at a time and the last one's readers are done;
/// made where undefined), its planned memory begun, its micro-batches' random ops drawing at
/// `random` from their own rows on (step_context.cpp). Throws a troupe::Error
/// naming an input that cannot be split.
StepContextPtr make_step_context(const ProgramSetup& setup, std::uint64_t step, const std::vector<Tensor>& inputs,
                                 const kernels::RandomPosition& random, std::vector<Tensor>& bucket_buffers,
                                 std::vector<Tensor>& step_values);

}  // namespace troupe::actors
