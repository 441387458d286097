#pragma once
// A node is an actor of the plan that speaks the register protocol (registers.hpp): the input
// actor, op actors, output sinks and gradient stages. node.cpp holds what they share, the step
// lifecycle and the protocol's messages; each kind says only what it does when it fires.

#include <memory>

#include "messages.hpp"
#include "plan.hpp"

namespace troupe::actors {

class Node;

/// What one kind of node does when the firing rule lets it act.
class NodeKind {
 public:
  virtual ~NodeKind() = default;
  /// Makes micro-batch `mb`'s outputs from the node's readable inputs; null when it passes nothing
  /// on. A troupe::Error it throws fails the step with its message, so it names the actor and why.
  virtual Values act(Node& node, int mb) = 0;
  /// Whether the program counts this node's end of step (sinks pass their value on instead).
  virtual bool reports_done() const { return true; }
  /// Sends what goes outside the register protocol (a sink's value), once the act is over and its
  /// inputs are given back: the step may end on such a send, so nothing of the act may follow it.
  virtual void after_act(Node&) {}
};

/// The protocol state of one node for the step in progress, and the sends every kind needs.
class Node {
 public:
  Node(NodeActor::pointer self, std::shared_ptr<const ActorPlan> plan, int index, int registers, PeersPtr peers,
       std::shared_ptr<NodeKind> kind);
  /// The plan entry of this node.
  const ActorSpec& spec() const { return *spec_; }
  /// The step in progress.
  const StepContext& ctx() const { return *ctx_; }
  /// The same as a handle, for messages that carry it.
  const StepContextPtr& ctx_ptr() const { return ctx_; }
  /// Where the other actors of the program are.
  const Peers& peers() const { return *peers_; }
  /// The value an input reference reads for the micro-batch being acted on.
  const Tensor& input(const InputRef& ref) const;
  /// Sends `xs..., flow` to `to`, traced as `kind` of this step carrying `bytes`.
  template <class Handle, class... Ts>
  void tell_to(const AddressOf<Handle>& to, const char* kind, std::uint64_t bytes, Ts&&... xs) {
    tell(self_, track(), to, SendTag{kind, ctx_->step, -1, bytes}, std::forward<Ts>(xs)...);
  }

  /// The handlers: a new step, a ready input register, a released output register, and a `go` for
  /// micro-batch `mb` (the step's memory plan, or the collectives' order, puts this act after another).
  void on_start(const StepContextPtr& ctx);
  void on_ready(ReadyPtr r);
  void on_release(std::uint64_t step, int reg);
  void on_go(const StepContextPtr& ctx, int mb);
  /// This node's track in traces.
  std::uint32_t track() const { return peers_->at(index_).track; }
  /// The step this node is on (0 before the first).
  std::uint64_t step() const { return step_; }

 private:
  void begin_step(const StepContextPtr& ctx);
  void pump();
  bool fire(int mb);
  void emit(int mb, Values values);
  void release_inputs();
  // Runs f; a troupe::Error or other exception it throws fails the step (false).
  template <class F>
  bool reporting_failure(F&& f);
  void report_failure(const std::string& what, ErrorKind kind);
  // The gos act (this node, mb) waits for: its memory edges', and its predecessor's among the collectives.
  int waits(int mb) const;
  // Tells the act after (this node, mb) among the collectives that it may go (collective_order.hpp).
  void signal_next_collective(int mb);

  NodeActor::pointer self_;
  std::shared_ptr<const ActorPlan> plan_;
  const ActorSpec* spec_;
  int index_;
  int registers_;
  int collective_ = -1;  // position among the plan's collectives, or -1
  PeersPtr peers_;
  std::shared_ptr<NodeKind> kind_;
  // The step in progress; a newer step's first message drops it, so a failed step leaves nothing behind.
  StepContextPtr ctx_;
  std::uint64_t step_ = 0;
  int next_mb_ = 0;
  bool failed_ = false;
  std::vector<int> gos_;          // per micro-batch: `go`s received this step
  InRegisters in_;
  OutRegisters out_;
};

/// Spawns node `index` of the plan as an actor running `kind`.
NodeActor spawn_node(caf::actor_system& sys, std::shared_ptr<const ActorPlan> plan, int index, int registers,
                      PeersPtr peers, std::shared_ptr<NodeKind> kind);

}  // namespace troupe::actors
