// Causal-softmax fusion (level 3): the score chain attention fusion leaves, in f32 and at O2
// between its casts, becomes one causal_softmax with the chain's bits; near misses are left alone;
// the op's gradients match finite differences; an O2 GPT block at level 3 runs it, forward and
// backward, and still tracks f32.
#include <gtest/gtest.h>

#include <limits>

#include "graph/gradcheck.hpp"
#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/amp.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/cpu_features.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {

using Fn = std::function<Var(const Var& x)>;

Graph graph_of(const Fn& f, DType dtype) {
  return trace([&](const std::vector<Var>& in) { return std::vector<Var>{f(in[0])}; }, {{"x", {2, 3, 12, 12}, dtype}})
      .graph();
}

// The chain as attention writes it, and as O2 leaves it (the mask and softmax in f32 between casts).
Var chain(const Var& x) { return softmax(causal_mask(x * 0.125), -1); }
Var o2_chain(const Var& x) { return cast(softmax(causal_mask(cast(x * 0.125, DType::f32)), -1), x.dtype()); }

}  // namespace

TEST(CausalSoftmaxFusion, FusesTheChainInF32AndBetweenO2sCastsWithItsBits) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Graph g = graph_of(dt == DType::f32 ? Fn(chain) : Fn(o2_chain), dt);
    const Graph fused = fuse_causal_softmax(g);
    ASSERT_EQ(fused.nodes().size(), 1u) << fused.dump();
    EXPECT_EQ(fused.nodes()[0].op, "causal_softmax");
    EXPECT_EQ(fused.nodes()[0].attrs.get_double("scale"), 0.125);
    test::expect_same_results(g, fused, {test::random_tensor({2, 3, 12, 12}, 1, -5, 5).to(dt)});
  }
}

TEST(CausalSoftmaxFusion, LeavesNearMissesAlone) {
  const std::vector<std::pair<DType, Fn>> near_misses{
      {DType::f32, [](const Var& x) { return softmax(causal_mask(x * 0.125), 2); }},  // not the keys' axis
      {DType::f32, [](const Var& x) { return softmax(causal_mask(x * 0.125 + x), -1); }},  // not a scale
      {DType::f32, [](const Var& x) { const Var s = x * 0.125; return softmax(causal_mask(s), -1) + s; }},  // s read twice
      {DType::bf16, [](const Var& x) { return softmax(causal_mask(cast(x * 0.125, DType::f32)), -1); }},  // no cast down
      {DType::bf16, [](const Var& x) {  // probabilities read before the cast down too
         const Var p = softmax(causal_mask(cast(x * 0.125, DType::f32)), -1);
         return cast(p, DType::bf16) + cast(p * 2.0, DType::bf16);
       }},
  };
  for (std::size_t i = 0; i < near_misses.size(); ++i) {
    const Graph g = graph_of(near_misses[i].second, near_misses[i].first);
    EXPECT_EQ(fuse_causal_softmax(g).dump(), g.dump()) << "near miss " << i;
  }
  // Probabilities read twice after the chain (not inside it) still fuse.
  const Graph twice = graph_of([](const Var& x) { const Var p = softmax(causal_mask(x * 0.125), -1); return p * p; },
                               DType::f32);
  EXPECT_EQ(test::count_ops(fuse_causal_softmax(twice), "causal_softmax"), 1);
}

TEST(CausalSoftmaxFusion, GradientsMatchFiniteDifferences) {
  for (double scale : {0.125, 0.3}) {
    test::expect_gradients_match(
        [scale](const std::vector<Var>& v) { return test::weighted_sum(causal_softmax(v[0], scale)); },
        {test::random_f64({2, 5, 5}, 2)});
  }
  EXPECT_THROW(causal_softmax(Var(test::random_tensor({3, 4}, 1)), 1.0), Error);
}

TEST(CausalSoftmaxFusion, AnO2GptBlockAtLevelThreeRunsItAndTracksF32) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  Generator gen(9);
  GPTBlock block(16, 2, gen);
  const auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(block(in[0]), in[1])}; };
  const std::vector<InputSpec> sig{{"x", {SymDim::symbol("batch"), 6, 16}}, {"t", {SymDim::symbol("batch"), 6, 16}}};
  const TracedFunction fused = trace(loss, sig).with_amp({AmpLevel::O2, DType::bf16}).optimized(3).with_gradients().optimized(3);
  EXPECT_EQ(test::count_ops(fused.graph(), "causal_softmax"), 1);
  EXPECT_EQ(test::count_ops(fused.graph(), "causal_softmax_backward"), 1);
  EXPECT_EQ(test::count_ops(fused.graph(), "causal_mask"), 0);
  const TracedFunction f32 = trace(loss, sig).with_gradients();
  const std::vector<Tensor> in{test::random_tensor({3, 6, 16}, 5), test::random_tensor({3, 6, 16}, 6)};
  const auto run = [&](const TracedFunction& f) {
    for (const Var& p : block.parameters()) p.zero_grad();
    std::vector<Tensor> out{f(in)[0]};
    for (const Var& p : block.parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const std::vector<Tensor> want = run(f32), got = run(fused);
  EXPECT_LE(test::scaled_max_error(got[0], want[0]), 2e-2);
  for (std::size_t i = 1; i < want.size(); ++i) EXPECT_LE(test::scaled_max_error(got[i], want[i]), 5e-2) << "gradient " << i;
}
