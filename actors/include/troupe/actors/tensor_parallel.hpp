#pragma once
// Tensor parallelism in the runtime: the collective ops of a sharded step (graph/spmd.hpp) run on
// transport communicators, one per mesh axis of the device. A device is one Engine: an op actor
// submits its collective to the communicator's thread and finishes its act when the completion
// comes back as a message, so no scheduler thread waits for the wire and the device's other acts
// (another micro-batch's compute) run meanwhile.
// TensorParallelStep is one device's part of a tensor-parallel training step, with the moves of
// whole tensors to the device's shards and back that checkpoints and evaluation need.

#include <map>
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
/// communicator's thread, in its queue's order, and says when it is over by a callback.
std::shared_ptr<graph::CollectiveGroup> communicator_group(std::shared_ptr<transport::Communicator> comm, std::string axis);

/// The names of the parameters of `step` that `plan` does not split along mesh axis `axis`: every
/// device of that axis holds them whole, so clipping counts each device's share of their norm 1/n
/// (ProgramOptions::tensor_parallel).
std::vector<std::string> replicated_parameters(const graph::TracedFunction& step, const graph::GraphPlacement& plan, int axis);

/// One device's part of a tensor-parallel training step: `plan` (of `step` on a mesh of one axis)
/// lowered for the device whose group along that axis is `comm` (its rank is the device's
/// coordinate). Compile local() with an optimizer over trained(), and ProgramOptions::
/// tensor_parallel's `replicated` from replicated().
class TensorParallelStep {
 public:
  TensorParallelStep(const graph::TracedFunction& step, graph::GraphPlacement plan, std::shared_ptr<transport::Communicator> comm);
  ~TensorParallelStep();
  TensorParallelStep(const TensorParallelStep&) = delete;
  TensorParallelStep& operator=(const TensorParallelStep&) = delete;
  /// The device's step: its shards as parameters, the plan's collectives inside.
  const graph::TracedFunction& local() const { return local_; }
  /// The plan it runs.
  const graph::GraphPlacement& plan() const { return plan_; }
  /// The parameters this device's optimizer updates: its shards of the step's trained parameters.
  std::vector<graph::Var> trained() const;
  /// The parameters every device of the group holds whole.
  const std::vector<std::string>& replicated() const { return replicated_; }
  /// Whole tensors from the group's shards: parameters by name, or optimizer state keyed
  /// "<parameter>.<slot>" (what Optimizer::state_dict gives); a tensor of a replicated parameter,
  /// or of no parameter, is taken as it is. A collective: every device of the group calls it
  /// with the same keys, between steps.
  std::map<std::string, Tensor> gather(const std::map<std::string, Tensor>& shards) const;
  /// This device's shards of whole tensors keyed as for gather().
  std::map<std::string, Tensor> shard(const std::map<std::string, Tensor>& whole) const;
  /// The device's shards of the parameters, by name (for gather()).
  std::map<std::string, Tensor> parameter_shards() const;

 private:
  // The split placement of the parameter whose tensor `key` is (null: taken whole).
  const graph::Placement* split_of(const std::string& key) const;
  graph::GraphPlacement plan_;
  std::unique_ptr<graph::GroupRegistration> group_;  // the device's group along the axis (its communicator)
  graph::TracedFunction local_;
  std::map<std::string, graph::Placement> splits_;  // the split parameters' placements
  std::vector<std::string> replicated_;
};

}  // namespace troupe::actors
