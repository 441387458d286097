#pragma once
// The collectives a sharded step's graph calls (graph/spmd.hpp): the communication between the
// devices of one mesh axis that a change of placement needs. The graph layer does not know how
// devices talk: the runtime registers a CollectiveGroup per mesh axis of each device (actors/ does
// it over transport's communicators), and the collective ops find it by the id in their "group"
// attribute. A group runs its collectives on a thread of its own, in the order they were
// submitted, and says when each is over by a callback: whoever submits one never waits for the
// wire (the runtime turns the callback into a message; run_on() waits, for callers that may).

#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "troupe/kernels/tensor.hpp"

namespace troupe::graph {

/// The blocking collectives of a group, as its own thread runs them (CollectiveGroup::submit).
class CollectiveWire {
 public:
  virtual ~CollectiveWire() = default;
  /// The sum over the devices of a dense f32 or f64 tensor, written into it.
  virtual void all_reduce(const Tensor& tensor) = 0;
  /// Every device's dense tensor, concatenated along dim 0 in device order.
  virtual Tensor all_gather(const Tensor& tensor) = 0;
  /// The sum over the devices of a dense f32 or f64 [size * k, ...] tensor, of which this device
  /// keeps part `rank`.
  virtual Tensor reduce_scatter(const Tensor& tensor) = 0;
  /// Point to point (a pipeline's activations and gradients): `tensor` to device `peer`.
  virtual void send(const Tensor& tensor, int peer) = 0;
  /// Fills the dense `into` with what device `peer` sent; an error when the sizes differ.
  virtual void recv(const Tensor& into, int peer) = 0;
};

/// Called once a submitted work is over, on the group's thread: null, or why it failed.
using CollectiveDone = std::function<void(std::exception_ptr)>;

/// The devices of one mesh axis as one of them sees it. Every device of the group must submit the
/// same collectives in the same order (a sharded step's collective ops are chained so that they do).
class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  /// This device's index along the axis.
  virtual int rank() const = 0;
  /// The axis's device count.
  virtual int size() const = 0;
  /// Queues `work` on the group's thread, after every work submitted before it; `work` runs its
  /// collectives on the wire, then `done` runs there with its failure or null.
  virtual void submit(std::function<void(CollectiveWire&)> work, CollectiveDone done) = 0;
  /// The group in errors: "tp (rank 1 of 2)".
  virtual std::string name() const = 0;
};

/// Runs `work` on `group` and waits for it, rethrowing its failure: for a caller that may block (a
/// user's thread gathering a checkpoint), never for an actor.
void run_on(CollectiveGroup& group, const std::function<void(CollectiveWire&)>& work);

/// A collective op's computation in the three parts the runtime runs apart (OpDef::collective):
/// what it made of its inputs on the caller's thread, `on_wire` on the group's thread, and
/// `finish`, back on the caller's thread once `on_wire` is over, making the outputs from it, or
/// rethrowing its failure (given) naming the op and the group. Allocations happen in the caller's
/// parts only, and `finish` takes back every tensor the parts share, so the group's thread never
/// frees a tensor of the step.
struct CollectiveCall {
  std::shared_ptr<CollectiveGroup> group;
  std::function<void(CollectiveWire&)> on_wire;
  std::function<std::vector<Tensor>(std::exception_ptr failure)> finish;
};

/// A group's registration: while it lives, collective ops whose "group" attribute is id() run on it.
class GroupRegistration {
 public:
  explicit GroupRegistration(std::shared_ptr<CollectiveGroup> group);
  ~GroupRegistration();
  GroupRegistration(const GroupRegistration&) = delete;
  GroupRegistration& operator=(const GroupRegistration&) = delete;
  /// The id collective ops name the group by.
  int id() const { return id_; }
  /// The group.
  const std::shared_ptr<CollectiveGroup>& group() const { return group_; }

 private:
  std::shared_ptr<CollectiveGroup> group_;
  int id_;
};

/// The group registered under `id`; an error naming the id when none is (its registration died).
std::shared_ptr<CollectiveGroup> collective_group(int id);

}  // namespace troupe::graph
