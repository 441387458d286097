#pragma once
// The engine: owns the actor system (CAF) and compiles traced graphs into actor programs. Usable
// from any C++ program: create an Engine, compile, run. Destroying it stops every program's actors.

#include <cstddef>
#include <memory>

#include "troupe/actors/program.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::actors {

/// How scheduler threads pick the next actor to run.
enum class Scheduling {
  fifo,           // one shared queue in ready order (default: gradient stages run as gradients complete)
  work_stealing,  // CAF's per-thread queues, newest first, idle threads steal
};

/// Engine settings.
struct EngineOptions {
  /// Scheduler threads; 0 = the machine's cores (CAF's own default would oversubscribe small machines).
  std::size_t threads = 0;
  /// Messages an actor may handle before yielding its thread (fairness between actors).
  std::size_t max_throughput = 64;
  /// Scheduling policy; fifo lets data-parallel AllReduces start while backward runs.
  Scheduling scheduling = Scheduling::fifo;
};

/// Owner of the actor system.
class Engine {
 public:
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  /// Lowers `fn` (forward, and backward when traced with_gradients) to actors. The program keeps
  /// the engine's actor system alive; its parameters are read afresh at every step.
  std::unique_ptr<Program> compile(const graph::TracedFunction& fn, ProgramOptions options = {});
  /// Scheduler threads in use.
  std::size_t threads() const;

  struct Impl;

 private:
  friend class Planner;  // spawns its actor on the engine's system
  std::shared_ptr<Impl> impl_;
};

}  // namespace troupe::actors
