#pragma once
// The planner actor, which places a Transformer's shards: asked about a traced training step, the
// devices and the model's placement policy, it searches every dp x tp mesh of them
// (plan::search_meshes, troupe/plan/mesh_search.hpp) on the engine's scheduler threads while the
// caller goes on, and answers with the candidates, the fastest that fits the memory budget first.

#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "troupe/actors/engine.hpp"
#include "troupe/plan/mesh_search.hpp"

namespace troupe::actors {

/// The planner actor on an engine's threads; questions are answered one at a time, in order.
class Planner {
 public:
  explicit Planner(Engine& engine);
  ~Planner();
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;
  /// Hands the planner `question` and returns at once; the future holds the candidates (or the
  /// planner's error: heads that no tp divides, a budget no mesh meets).
  std::future<std::vector<plan::MeshCandidate>> ask(plan::MeshSearch question);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
