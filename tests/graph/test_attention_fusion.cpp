// Attention fusion at JIT level 3: the attention layer's chain becomes one causal_attention node in
// forward graphs, autodiff then takes the fused backward, results stay within 1e-6 of the unfused
// graph (training included), and chains that differ in any way, or whose values have other
// readers, are left alone.
#include <gtest/gtest.h>

#include <limits>

#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
const SymDim kBatch = SymDim::symbol("batch");


// The outputs of fn's graph and of `optimized`, on the same inputs, within `tolerance` (scaled).
void expect_close_results(const TracedFunction& fn, const Graph& optimized, const std::vector<Tensor>& inputs,
                          double tolerance) {
  const auto params = test::parameter_tensors(fn);
  const auto a = execute(fn.graph(), inputs, params), b = execute(optimized, inputs, params);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LE(test::scaled_max_error(b[i], a[i]), tolerance) << "output " << i;
}

// A graph of q, k, v inputs [2, 3, 8, 4] running `attention`.
TracedFunction qkv_graph(const std::function<Var(const Var&, const Var&, const Var&)>& attention) {
  const SymShape s{2, 3, 8, 4};
  return trace([&](const std::vector<Var>& in) { return std::vector<Var>{attention(in[0], in[1], in[2])}; },
               {{"q", s}, {"k", s}, {"v", s}});
}

Var chain(const Var& q, const Var& k, const Var& v) { return matmul(softmax(causal_mask(matmul(q, k, false, true) * 0.5)), v); }

std::vector<Tensor> qkv_inputs() {
  return {test::random_tensor({2, 3, 8, 4}, 1), test::random_tensor({2, 3, 8, 4}, 2), test::random_tensor({2, 3, 8, 4}, 3)};
}
}  // namespace

TEST(AttentionFusion, TheChainBecomesOneNode) {
  const TracedFunction fn = qkv_graph(chain);
  const Graph fused = fuse_attention(fn.graph());
  EXPECT_EQ(test::count_ops(fused, "causal_attention"), 1);
  EXPECT_EQ(test::count_ops(fused, "softmax") + test::count_ops(fused, "causal_mask") + test::count_ops(fused, "matmul"), 0);
  EXPECT_EQ(fused.nodes().size(), 1u);
  check_graph(fused);
  expect_close_results(fn, fused, qkv_inputs(), 1e-6);
}

TEST(AttentionFusion, NearMissesAreLeftAlone) {
  const std::vector<std::function<Var(const Var&, const Var&, const Var&)>> near_misses{
      // the probabilities are also an output: another reader
      [](const Var& q, const Var& k, const Var& v) {
        const Var p = softmax(causal_mask(matmul(q, k, false, true) * 0.5));
        return matmul(p, v) + sum(p, {-1}, true);
      },
      // masked with 0, not -inf
      [](const Var& q, const Var& k, const Var& v) {
        return matmul(softmax(apply1("causal_mask", {matmul(q, k, false, true) * 0.5}, Attrs().set("fill", 0.0))), v);
      },
      // q k without the transpose
      [](const Var& q, const Var& k, const Var& v) { return matmul(softmax(causal_mask(matmul(q, permute(k, {0, 1, 3, 2})) * 0.5)), v); },
      // softmax over the queries
      [](const Var& q, const Var& k, const Var& v) { return matmul(softmax(causal_mask(matmul(q, k, false, true) * 0.5), 2), v); },
      // no scale
      [](const Var& q, const Var& k, const Var& v) { return matmul(softmax(causal_mask(matmul(q, k, false, true))), v); },
  };
  for (std::size_t i = 0; i < near_misses.size(); ++i) {
    const TracedFunction fn = qkv_graph(near_misses[i]);
    const Graph after = fuse_attention(fn.graph());
    EXPECT_EQ(test::count_ops(after, "causal_attention"), 0) << "near miss " << i;
    EXPECT_EQ(after.nodes().size(), fn.graph().nodes().size()) << "near miss " << i;
  }
}

TEST(AttentionFusion, AGraphWithBackwardNodesKeepsItsChain) {
  // After with_gradients the backward reads the chain's values, so fusing would leave them behind.
  Generator gen(3);
  CausalSelfAttention attn(16, 2, gen);
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mean(attn(in[0]))}; };
  const TracedFunction fn = trace(loss, {{"x", {kBatch, 8, 16}}}).with_gradients();
  EXPECT_EQ(test::count_ops(optimize(fn.graph(), 3), "causal_attention"), 0);
}

TEST(AttentionFusion, TrainingAGptBlockAtLevelThreeMatchesLevelOne) {
  Generator gen(5);
  GPTBlock block(16, 2, gen, 32);
  auto loss = [&](const std::vector<Var>& in) {
    const Var y = block(in[0]);
    return std::vector<Var>{mean(y * y)};
  };
  const std::vector<InputSpec> sig{{"x", {kBatch, 8, 16}}};
  const TracedFunction plain = trace(loss, sig).with_gradients();
  const TracedFunction fused = trace(loss, sig).optimized(3).with_gradients().optimized(3);
  EXPECT_EQ(test::count_ops(fused.graph(), "causal_attention"), 1);
  EXPECT_EQ(test::count_ops(fused.graph(), "causal_attention_backward"), 1);
  EXPECT_EQ(test::count_ops(fused.graph(), "softmax") + test::count_ops(fused.graph(), "softmax_backward"), 0);
  for (std::int64_t batch : {1, 3}) {
    const std::vector<Tensor> x{test::random_tensor({batch, 8, 16}, 7 + static_cast<std::uint64_t>(batch))};
    const auto a = execute(plain.graph(), x, test::parameter_tensors(plain)), b = execute(fused.graph(), x, test::parameter_tensors(fused));
    ASSERT_EQ(a.size(), b.size());  // the loss, then one gradient per parameter
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LE(test::scaled_max_error(b[i], a[i]), 1e-5) << "output " << i;
  }
}
