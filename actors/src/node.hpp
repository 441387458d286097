#pragma once
// A node is an actor of the plan that speaks the register protocol (registers.hpp): the input
// actor, op actors, output sinks and gradient stages. node.cpp holds what they share, the step
// lifecycle and the protocol's messages; each kind says only what it does when it fires.

#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "messages.hpp"
#include "actor_graph.hpp"

namespace troupe::actors {

class ActMemory;
class Node;

/// An act that waits for something outside the actors (a collective on the wire): begun on the
/// node's thread, it ends there too, when the outside part's completion arrives as a message, and
/// the node's thread serves other actors meanwhile.
struct Suspension {
  std::uint32_t track = 0;  // where the outside part runs, in traces (its completion is sent from there)
  /// Starts the outside part; `over` runs once, on whichever thread finished it, with its failure or null.
  std::function<void(std::function<void(std::exception_ptr)> over)> launch;
  /// Ends the act on the node's thread: its outputs, or the outside part's failure thrown as a troupe::Error.
  std::function<Values(std::exception_ptr)> resume;
};

/// What one kind of node does when the firing rule lets it act.
class NodeKind {
 public:
  virtual ~NodeKind() = default;
  /// Makes micro-batch `mb`'s outputs from the node's readable inputs; null when it passes nothing
  /// on. A troupe::Error it throws fails the step with its message, so it names the actor and why.
  virtual Values act(Node& node, int mb) = 0;
  /// Whether this kind's acts suspend (begin, then resume) instead of acting at once.
  virtual bool suspends() const { return false; }
  /// Begins micro-batch `mb`'s act of a kind that suspends; errors as act().
  virtual Suspension begin(Node& node, int mb);
  /// Whether the program counts this node's end of step (sinks pass their value on instead).
  virtual bool reports_done() const { return true; }
  /// Sends what goes outside the register protocol (a sink's value), once the act is over and its
  /// inputs are given back: the step may end on such a send, so nothing of the act may follow it.
  virtual void after_act(Node&) {}
};

/// The protocol state of one node for the step in progress, and the sends every kind needs.
class Node {
 public:
  Node(NodeActor::pointer self, std::shared_ptr<const ActorGraph> plan, int index, int registers, PeersPtr peers,
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
  /// The act's inputs in spec().inputs order, taken out of the registers so that the act can let
  /// go of each once it has no more use for it (a grouped actor's later members need the memory);
  /// the registers are still given back when the act is over. Call it at most once per act.
  std::vector<Tensor> take_inputs();
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
  /// The outside part of micro-batch `mb`'s suspended act is over (`error` null) or failed.
  void on_acted(std::uint64_t step, int mb, std::exception_ptr error);
  /// The stream work micro-batch `mb`'s inputs waited for is over (or failed: their events say).
  void on_synced(std::uint64_t step, int mb);
  /// ZeRO-1: a parameter this node reads has been all-gathered for the step (`error` null) or its
  /// all-gather failed.
  void on_gathered(std::uint64_t step, std::exception_ptr error);
  /// This node's track in traces.
  std::uint32_t track() const { return peers_->at(index_).track; }
  /// The step this node is on (0 before the first).
  std::uint64_t step() const { return step_; }

 private:
  void begin_step(const StepContextPtr& ctx);
  void pump();
  // Tells the program this node finished the step (unless its kind reports otherwise).
  void report_done();
  bool fire(int mb);
  // Stream order: a node on a stream makes it wait for the inputs other streams write; any other
  // node learns by message when they are written (false: it waits, or they failed).
  bool inputs_written(int mb);
  // Begins a suspended act; it ends in on_acted.
  void suspend(int mb);
  // The end of an act whose outputs `make` makes within `memory` (queued on the node's stream, if
  // it has one): inputs given back, outputs passed on, the acts waiting for this one told.
  template <class Make>
  bool complete(int mb, std::optional<ActMemory>& memory, Make&& make);
  // ZeRO-1: asks to be told when each parameter this node reads has been all-gathered for the step.
  void await_parameters();
  void emit(int mb, Values values, const Event& written);
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
  std::shared_ptr<const ActorGraph> plan_;
  const ActorSpec* spec_;
  int index_;
  int registers_;
  int collective_ = -1;  // position among the plan's collectives, or -1
  PeersPtr peers_;
  std::shared_ptr<NodeKind> kind_;
  Stream* stream_ = nullptr;  // where its acts queue their kernels (ActorSpec::stream), or null
  // The step in progress; a newer step's first message drops it, so a failed step leaves nothing behind.
  StepContextPtr ctx_;
  std::uint64_t step_ = 0;
  int next_mb_ = 0;
  bool failed_ = false;
  std::vector<int> gos_;          // per micro-batch: `go`s received this step
  // The suspended act: its micro-batch, the allocations it made so far and its end.
  struct Pending {
    int mb = 0;
    std::size_t allocations = 0;
    std::function<Values(std::exception_ptr)> resume;
  };
  std::optional<Pending> pending_;
  std::optional<int> syncing_;    // the micro-batch whose inputs' stream work it waits for
  std::vector<int> parameters_;   // the program parameters this node reads (ZeRO-1 waits for their all-gather)
  int ungathered_ = 0;            // of those, how many this step's acts still wait for
  InRegisters in_;
  OutRegisters out_;
  std::vector<Taken> taken_;  // registers take_inputs() emptied, given back at the act's end
  bool inputs_taken_ = false;
};

/// Spawns node `index` of the plan as an actor running `kind`.
NodeActor spawn_node(caf::actor_system& sys, std::shared_ptr<const ActorGraph> plan, int index, int registers,
                      PeersPtr peers, std::shared_ptr<NodeKind> kind);

}  // namespace troupe::actors
