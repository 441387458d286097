#pragma once
// The program actor: takes run requests, starts one step at a time, collects what the other actors
// report (done, results, optimizer updates, failures) and answers the caller.

#include <caf/fwd.hpp>

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
};

/// Spawns the program actor.
caf::actor spawn_program_actor(caf::actor_system& sys, std::shared_ptr<const ProgramSetup> setup);

}  // namespace troupe::actors
