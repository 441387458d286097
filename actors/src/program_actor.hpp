#pragma once
// The program actor: takes run requests, starts one step at a time, collects what the other actors
// report (done, results, optimizer updates, failures) and answers the caller.

#include <caf/fwd.hpp>

#include "bucket_plan.hpp"
#include "messages.hpp"
#include "plan.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::actors {

/// What the program actor needs to know about the program it runs.
struct ProgramSetup {
  std::shared_ptr<const graph::TracedFunction> fn;
  std::shared_ptr<const ActorPlan> plan;
  int micro_batches = 1;
  double clip_grad_norm = 0;  // 0: no clipping
  ClipMode clip_mode = ClipMode::parallel;
  std::vector<std::vector<std::string>> optimizer_params;  // parameter names per optimizer actor
  std::vector<caf::actor> optimizers;
  PeersPtr peers;
  // Data parallel (comm null when off): bucket plan and actors, overlap = start AllReduces during
  // backward (the parallel path) rather than after the step (the naive one).
  std::shared_ptr<transport::Communicator> comm;
  std::shared_ptr<const BucketPlan> buckets;
  std::vector<caf::actor> bucket_actors;
  bool overlap = true, gradients_mean = true;
  std::uint32_t comm_trace_id = 0;         // the communicator's track in traces
  std::vector<std::uint32_t> bucket_trace_ids;
};

/// Spawns the program actor.
caf::actor spawn_program_actor(caf::actor_system& sys, std::shared_ptr<const ProgramSetup> setup);

}  // namespace troupe::actors
