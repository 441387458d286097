#pragma once
// The kinds of actor a program is made of, one file each. Nodes speak the register protocol
// (node.hpp): the input actor hands each micro-batch's inputs out, an op actor runs one graph op,
// an output sink combines its micro-batches and reports to the program, a gradient stage combines
// its gradient and passes it on along the gradient path: a bucket actor and the communicator
// actor AllReduce it (data parallel), the clip actor takes the global norm, an optimizer actor
// applies it. The program actor (program_actor.hpp) only steers.

#include <caf/fwd.hpp>

#include <memory>

#include "bucket_layout.hpp"
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

/// What an optimizer actor is given at spawn.
struct OptimizerSetup {
  std::shared_ptr<graph::Optimizer> optimizer;  // null: it only collects the gradients the step returns
  int index = 0;                                // among the program's optimizer actors
  std::uint32_t track = 0;
  PeersPtr peers;
  std::shared_ptr<const std::vector<std::string>> names;  // per sink: the parameter its gradient is for
  int gradients = 0;                            // gradients it receives per step
  bool clipping = false;                        // it waits for the clip actor's coefficient (clipping or loss scaling)
  bool returns = true;                          // it hands the gradients it used to the program for the result
  std::shared_ptr<ZeroShard> zero;              // ZeRO-1: it updates this rank's slices alone, then all-gathers
};
/// Spawns an optimizer actor (optimizer_actor.cpp).
OptimizerActor spawn_optimizer_actor(caf::actor_system& sys, OptimizerSetup setup);

/// What the clip actor is given at spawn.
struct ClipSetup {
  double max_norm = 0;      // 0: no clipping, only the loss scale divided out
  std::shared_ptr<graph::GradScaler> scaler;  // null: the gradients are not scaled
  int slots = 0;            // partial norms per step: one per gradient, or per bucket (parallel, data parallel)
  bool takes_norms = true;  // parallel: squared norms arrive; naive: gradients, whose norms it takes
  std::vector<double> weights;  // naive: per slot, its squared norm's weight (tensor parallelism)
  std::vector<std::shared_ptr<transport::Communicator>> norms;  // the groups whose sums add up: tensor
                                                                // parallelism's, ZeRO-1's (each rank's slice)
  std::uint32_t track = 0;
  std::uint32_t norms_track = 0;  // where the groups' sums run, in traces
  PeersPtr peers;
};
/// Spawns the clip actor (clip_actor.cpp).
ClipActor spawn_clip_actor(caf::actor_system& sys, ClipSetup setup);

/// Spawns the actor of bucket `index` of peers' bucket plan (bucket_actor.cpp).
BucketActor spawn_bucket_actor(caf::actor_system& sys, int index, std::uint32_t track, PeersPtr peers);

/// What the communicator actor is given at spawn.
struct CommunicatorSetup {
  std::shared_ptr<transport::Communicator> comm;
  bool overlap = true;         // AllReduce each bucket once full, or all of them after backward
  bool gradients_mean = true;  // average (or sum) the ranks' gradients
  bool zero = false;           // ZeRO-1: reduce-scatter the buckets (each rank's slice reduced)
  std::uint32_t track = 0;     // the actor's track in traces
  std::uint32_t comm_track = 0;  // the communicator thread's track: the collectives themselves
  PeersPtr peers;
};
/// Spawns the communicator actor (communicator_actor.cpp).
CommunicatorActor spawn_communicator_actor(caf::actor_system& sys, CommunicatorSetup setup);

/// The actors after the gradient stages, for stopping them and counting them by kind.
struct GradientActors {
  std::vector<caf::actor> all;
  std::map<std::string, int> counts;  // "optimizer", "bucket", "clip", "communicator"
};
/// Spawns the gradient path of a program (optimizer, clip, bucket and communicator actors, as the
/// options ask) and fills peers->gradients (gradient_path.cpp). Throws a troupe::Error naming
/// options that cannot work.
GradientActors spawn_gradient_path(caf::actor_system& sys, const graph::TracedFunction& fn, const ActorGraph& plan,
                                   const ProgramOptions& options, const PeersPtr& peers);

}  // namespace troupe::actors
