#pragma once
// Tensor parallelism in the runtime: the collective ops of a sharded step (graph/spmd.hpp) run on
// transport communicators, one per mesh axis of the device. A device is one Engine: its op actors
// call the collectives and wait for them (a device's collectives are chained, so at most one of
// its actors waits at a time, and the peers progress on their own engines' threads).

#include <memory>
#include <string>

#include <vector>

#include "troupe/graph/collectives.hpp"
#include "troupe/graph/sharding.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::transport {
class Communicator;
}

namespace troupe::actors {

/// The collective group of one device along mesh axis `axis` (its name in errors, e.g. "tp"),
/// over `comm`, whose ranks are the devices of that axis: each collective runs on the
/// communicator's thread, in its queue's order, while the caller waits.
std::shared_ptr<graph::CollectiveGroup> communicator_group(std::shared_ptr<transport::Communicator> comm, std::string axis);

/// The names of the parameters of `step` that `plan` does not split along mesh axis `axis`: every
/// device of that axis holds them whole, so clipping counts each device's share of their norm 1/n
/// (ProgramOptions::tensor_parallel).
std::vector<std::string> replicated_parameters(const graph::TracedFunction& step, const graph::ShardingPlan& plan, int axis);

}  // namespace troupe::actors
