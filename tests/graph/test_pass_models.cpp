// The level-2 pipeline on real models and random graphs: the optimised graph computes the same
// bits as the traced one (outputs and gradients, training and inference), and removes the nodes
// it clearly must. Prints the node counts per pass.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "graph/gradcheck.hpp"
#include "graph/models.hpp"
#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/custom_gradient.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
const SymDim kBatch = SymDim::symbol("batch");


// Optimises fn's graph at level 2 with checks on, prints the counts under `name`, expects the
// same bits for each input set, and returns the per-pass statistics.
std::vector<PassStat> expect_pipeline_exact(const std::string& name, const TracedFunction& fn,
                                            const std::vector<std::vector<Tensor>>& input_sets) {
  std::vector<PassStat> stats;
  const Graph optimized = optimize(fn.graph(), 2, {true, ""}, &stats);
  std::cout << name << ":";
  for (const PassStat& s : stats) std::cout << ' ' << s.pass << ' ' << s.nodes_before << "->" << s.nodes_after;
  std::cout << '\n';
  for (const auto& inputs : input_sets) test::expect_same_results(fn.graph(), optimized, inputs, test::parameter_tensors(fn));
  return stats;
}

std::size_t removed_by(const std::vector<PassStat>& stats, const std::string& pass) {
  for (const PassStat& s : stats)
    if (s.pass == pass) return s.nodes_before - s.nodes_after;
  return 0;
}

}  // namespace

TEST(PassModels, GptBlockTrainingAndInference) {
  Generator gen(5);
  GPTBlock block(16, 2, gen, 32);
  auto forward = [&](const std::vector<Var>& in) { return std::vector<Var>{block(in[0])}; };
  auto loss = [&](const std::vector<Var>& in) {
    const Var y = block(in[0]);
    return std::vector<Var>{mean(y * y), y};
  };
  const std::vector<InputSpec> sig{{"x", {kBatch, 8, 16}}};
  const std::vector<std::vector<Tensor>> inputs{{test::random_tensor({1, 8, 16}, 1)}, {test::random_tensor({3, 8, 16}, 2)}};
  const auto train = expect_pipeline_exact("gpt block, training", trace(loss, sig).with_gradients(), inputs);
  EXPECT_GE(removed_by(train, "constant-folding"), 2u) << "the backward's seed zeros_like(loss) + 1 is a constant";
  EXPECT_GE(removed_by(train, "cse"), 1u) << "d(y*y) multiplies the same two values twice";
  expect_pipeline_exact("gpt block, inference", trace(forward, sig), inputs);
}

TEST(PassModels, SrLiteLikeConvNets) {
  for (bool custom : {true, false}) {
    test::SrLike net(custom);
    auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(net(in[0]), in[1])}; };
    auto forward = [&](const std::vector<Var>& in) { return std::vector<Var>{net(in[0])}; };
    const std::vector<InputSpec> sig{{"x", {kBatch, 3, 8, 8}}, {"y", {kBatch, 3, 16, 16}}};
    const std::vector<std::vector<Tensor>> inputs{
        {test::random_tensor({2, 3, 8, 8}, 3), test::random_tensor({2, 3, 16, 16}, 4)}};
    const std::string name = custom ? "sr-lite-like (custom relu)" : "sr-lite-like (relu)";
    const auto train = expect_pipeline_exact(name + ", training", trace(loss, sig).with_gradients(), inputs);
    EXPECT_GE(removed_by(train, "constant-folding"), 3u) << "the seed of the backward and its reshape are constants";
    EXPECT_GE(removed_by(train, "cse"), 1u) << "d((y-t)^2) multiplies the same two values twice";
    expect_pipeline_exact(name + ", inference", trace(forward, {sig[0]}), {{inputs[0][0]}});
  }
}
