// Strategy files (troupe/plan/strategy.hpp) on arbitrary bytes: read, checked against the step
// they were saved for, and planned; every refusal must be a one-line troupe::Error.
#include <memory>

#include "fuzz/files.hpp"
#include "fuzz/targets.hpp"
#include "troupe/models/gpt_placement.hpp"
#include "troupe/plan/propagation.hpp"
#include "troupe/plan/strategy.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"

namespace troupe::fuzz {

namespace {

// A Transformer block's training step, which the seed's strategy places on tp=2, Megatron style.
struct Step {
  Generator gen{1};
  graph::GPTBlock block{8, 2, gen};
  graph::TracedFunction step = graph::trace(
                                   [this](const std::vector<graph::Var>& in) {
                                     const graph::Var y = block(in[0]);
                                     return std::vector<graph::Var>{graph::sum(y * y, {}, false)};
                                   },
                                   {{"x", {2, 4, 8}}})
                                   .with_gradients();
  graph::Mesh mesh = plan::job_mesh(1, 2, 2);
};

}  // namespace

FuzzTarget strategy_target(const std::string& scratch) {
  auto s = std::make_shared<Step>();
  const std::string path = scratch + "/strategy.json";
  const plan::PlacementRequest request = models::megatron_gpt_placement(s->step, s->mesh, 2);
  const graph::GraphPlacement placed =
      plan::propagate_sharding(s->step.graph(), s->mesh, request.given, request.required, {});
  plan::save_strategy(path, plan::make_strategy(s->step, s->mesh, request, placed));
  FuzzTarget t;
  t.name = "strategy";
  t.seeds = {read_bytes(path)};
  t.dictionary = {"\"format\"", "\"troupe-strategy\"", "\"version\"", "\"fingerprint\"", "\"mesh\"", "\"tp\"",
                  "\"parameters\"", "\"placement\"", "\"shape\"", "\"shard_shape\"", "\"pins\"", "\"node\"",
                  "\"output\"", "\"outputs\"", "\"ops\"", "\"S(0)\"", "\"S(1)x3\"", "\"P\"", "\"B\"", "\"S(7)\""};
  t.run = [s, path](const std::string& bytes) {
    write_bytes(path, bytes);
    const plan::Strategy loaded = plan::load_strategy(path);
    const plan::PlacementRequest r = plan::strategy_request(loaded, s->step, s->mesh, path);
    (void)plan::propagate_sharding(s->step.graph(), s->mesh, r.given, r.required, {});
    return std::string(r.given.empty() ? "accepted, nothing placed" : "accepted");
  };
  return t;
}

}  // namespace troupe::fuzz
