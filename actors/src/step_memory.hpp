#pragma once
// Memory pre-allocation for the steps of a program (JIT level 3). Every host tensor an act
// allocates (a register's outputs, a kernel's temporaries) is a block of one planned arena per
// input shape, so a steady-state step makes no allocator calls, and a register is its planned
// blocks, as in OneFlow.
//
// An actor program has no single schedule: its acts (an actor firing for one micro-batch) are
// ordered only by the protocol. Act (P, m) comes before (C, m) when P feeds C; an actor acts for
// m before m + 1; and with R registers, (X, m + R) waits for every consumer of X to have read
// micro-batch m (ActOrder). A block is dead once every act that could touch it is over: the act
// that made it, the readers of every register that carried it (views included), and the act that
// dropped it. Values die in the last reader's thread before it sends anything on (registers.hpp),
// so a block may share bytes with one born in an act that all of those acts come before. Blocks
// dropped outside the acts (by an optimizer) live to the end of the step; blocks still alive
// after it (outputs, kept gradients) get slots of their own. The micro-batches in flight are acts
// of the same step, so the plan holds each of their registers at once when they coexist.
//
// The protocol's order alone leaves much unordered (parallel branches, weight gradients), and a
// plan for every such order would hold far more than a step ever does. So the first step of a
// shape records, besides which act made, read and dropped each block, when each act began and
// ended; two blocks may share bytes when every act touching the first was over before the
// second's maker began, and where the protocol does not already guarantee that, the plan adds a
// memory edge: the maker waits for a `go` from that act. The edges follow the recorded run's
// start times, as the protocol's own order does, so the two together stay acyclic and the
// recorded run satisfies them: no deadlock, and the recorded order's sharing holds in every run.
// Later steps lease each act's k-th allocation from its block. A step that allocates
// differently, or finds a block's bytes still in use, falls back to the allocator from there on,
// stays correct, and has its shape recorded again: every lease checks that no live tensor holds
// its bytes.

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "actor_graph.hpp"
#include "step_context.hpp"
#include "troupe/graph/arena_layouts.hpp"
#include "troupe/kernels/planned_memory.hpp"

namespace troupe::actors {

/// The order the register protocol guarantees between the acts of a step, in every run: act a
/// comes before act b when b cannot start until a is over. Acts are numbered mb * actors + actor.
class ActOrder {
 public:
  /// The order for `plan` with `micro_batches` per step and `registers` per actor output.
  ActOrder(const ActorGraph& plan, int micro_batches, int registers);
  /// The number of act (actor, mb) among `actors` actors.
  static int act(int actor, int mb, int actors) { return mb * actors + actor; }
  /// True when act a is over before act b starts (never for a == b).
  bool before(int a, int b) const;

 private:
  int act(int actor, int mb) const { return act(actor, mb, actors_); }
  int actors_;
  std::size_t acts_, words_;
  std::vector<std::uint64_t> reach_;  // per act, a bit per act it comes before
};

/// One step's memory, shared by its acts on every thread: recording, or served by a plan.
class StepArena;

/// While it lives, the host allocations of this thread are act (actor, mb)'s of `step` (null:
/// they go to the allocator).
class ActMemory final : public HostMemoryScope {
 public:
  ActMemory(StepArena* step, int actor, int mb);
  /// Resumes act (actor, mb), suspended after `made` allocations (suspend()).
  ActMemory(StepArena* step, int actor, int mb, std::size_t made);
  ~ActMemory() override;
  /// Ends this scope but not the act, which goes on in a later scope (a collective's act resumes
  /// when the wire is done): the allocations it made so far, to resume with.
  std::size_t suspend();
  /// Tells the step that the act put `values` into a register: recording notes their readers.
  void emitted(const std::vector<Tensor>& values);
  MemoryLease lease(std::size_t bytes) override;

 private:
  StepArena* step_;
  int actor_, mb_, act_;
  std::size_t next_ = 0;  // the act's allocations so far
  bool suspended_ = false;
};

/// The memory edges into act (actor, mb) of `step`: how many `go` signals it waits for before it
/// may act (0 without a plan).
int memory_waits(const StepArena* step, int actor, int mb);
/// Calls `go(actor, mb)` for each act that act (actor, mb) of `step` must signal once it is over.
void for_each_memory_signal(const StepArena* step, int actor, int mb, const std::function<void(int, int)>& go);

/// The planned memory of one program: per input shape (a bounded cache, least recently used
/// evicted) a plan over the acts of a step.
class StepMemory {
 public:
  /// For programs of `plan`, with `registers` per actor output; at most `capacity` shapes keep a plan.
  StepMemory(std::shared_ptr<const ActorGraph> plan, int registers, std::size_t capacity = 8);
  ~StepMemory();
  /// The memory of the step of `ctx` (its inputs fix the shape): recording or planned.
  std::shared_ptr<StepArena> begin(const StepContext& ctx);
  /// The step is over: a recording becomes its shape's plan; a failed or diverged step drops it.
  void end(StepArena& step, bool failed);
  /// The measured and planned peaks of the shape ended last, and the totals.
  graph::MemoryPlanReport report() const;

 private:
  struct Entry;
  Entry& entry_for(const std::vector<Shape>& key);  // the caller locks

  std::shared_ptr<const ActorGraph> plan_;
  int registers_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  std::uint64_t plans_built_ = 0, steps_served_ = 0;
  graph::MemoryPlanReport last_;
};

}  // namespace troupe::actors
