#pragma once
// The planner actor, which places a Transformer's shards: asked about a traced GPT training step
// and the devices, it searches every dp x tp mesh of them (search_gpt_meshes, planning.hpp) on the
// engine's scheduler threads while the caller goes on (troupe-gpt loads its data meanwhile), and
// answers with the candidates, the fastest that fits the memory budget first.

#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "troupe/actors/engine.hpp"
#include "troupe/actors/planning.hpp"

namespace troupe::actors {

/// What the planner is asked.
struct PlanQuestion {
  graph::TracedFunction step;                // a GPT training step (with gradients)
  int world = 1;                             // devices to place it on
  std::int64_t heads = 1;                    // attention heads (tp must divide them)
  graph::SymBindings bindings;               // sizes of the symbolic dims (the global batch)
  CostModel cost;
  double memory_budget = 0;                  // bytes per device; 0: none
  double optimizer_bytes_per_parameter = 8;  // AdamW's two f32 moments
  bool zero1 = false;                        // ZeRO-1 on the dp axis
};

/// The planner actor on an engine's threads; questions are answered one at a time, in order.
class Planner {
 public:
  explicit Planner(Engine& engine);
  ~Planner();
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;
  /// Hands the planner `question` and returns at once; the future holds the candidates (or the
  /// planner's error: heads that no tp divides, a budget no mesh meets).
  std::future<std::vector<MeshCandidate>> ask(PlanQuestion question);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
