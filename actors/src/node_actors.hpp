#pragma once
// The actors a program is made of. Input, op and sink actors speak the register protocol:
// a producer fires when its inputs are readable and it has a free register, sends `ready` to each
// consumer, and reuses the register once every consumer sent `release`. Optimizer actors apply one
// optimizer at the end of a step. All report to the program actor (program_actor.cpp).

#include <memory>

#include <caf/fwd.hpp>

#include "messages.hpp"
#include "plan.hpp"

namespace troupe::actors {

/// Spawns the actor for plan entry `index`.
caf::actor spawn_node_actor(caf::actor_system& sys, std::shared_ptr<const ActorPlan> plan, int index,
                            std::shared_ptr<const graph::Graph> graph, int registers, PeersPtr peers);

/// Spawns the actor that runs `optimizer` (index `index` among the program's optimizers).
caf::actor spawn_optimizer_actor(caf::actor_system& sys, std::shared_ptr<graph::Optimizer> optimizer, int index,
                                 std::uint32_t trace_id, PeersPtr peers);

}  // namespace troupe::actors
