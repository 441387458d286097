#pragma once
// The kinds of actor a program is made of, one file each. Nodes speak the register protocol
// (node.hpp): the input actor hands each micro-batch's inputs out, an op actor runs one graph op,
// an output sink and a gradient stage combine their micro-batches and report to the program.
// Bucket actors finish an AllReduced gradient bucket; optimizer actors apply one optimizer at the
// end of a step. The program actor (program_actor.hpp) steers them all.

#include <caf/fwd.hpp>

#include <memory>

#include "bucket_plan.hpp"
#include "node.hpp"
#include "troupe/graph/graph.hpp"
#include "troupe/graph/optim.hpp"

namespace troupe::actors {

/// The input actor: emits the step's inputs of each micro-batch (input_actor.cpp).
std::shared_ptr<NodeKind> input_kind();
/// An op actor: runs plan entry `spec`'s node of `graph` (op_actor.cpp).
std::shared_ptr<NodeKind> op_kind(std::shared_ptr<const graph::Graph> graph, const ActorSpec& spec);
/// An output sink: the micro-batches' values averaged by rows or concatenated (sink_actor.cpp).
std::shared_ptr<NodeKind> output_sink_kind();
/// A gradient stage: a parameter's gradient over the micro-batches, with its squared norm when the
/// step clips in parallel (gradient_stage_actor.cpp).
std::shared_ptr<NodeKind> gradient_stage_kind();
/// The kind of plan entry `spec`.
std::shared_ptr<NodeKind> kind_of(const ActorSpec& spec, std::shared_ptr<const graph::Graph> graph);

/// Spawns a bucket actor; each reduced message names the bucket it carries (bucket_actor.cpp).
caf::actor spawn_bucket_actor(caf::actor_system& sys, std::shared_ptr<const BucketPlan> plan, std::uint32_t track,
                              PeersPtr peers);

/// Spawns the actor that runs `optimizer`, index `index` among the program's (optimizer_actor.cpp).
caf::actor spawn_optimizer_actor(caf::actor_system& sys, std::shared_ptr<graph::Optimizer> optimizer, int index,
                                 std::uint32_t track, PeersPtr peers);

}  // namespace troupe::actors
