// bias_gelu, gelu(h + b) in one pass, and the level-3 pass that fuses a Linear layer's bias with
// its gelu: the same bits as add-then-gelu, forward and backward, in f32 and f64, on strided h;
// near misses are left alone; an MLP trained at level 3 gives exactly the level-1 results.
#include <gtest/gtest.h>

#include "graph/gradcheck.hpp"
#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
// y and the gradients of weighted_sum(y) wrt h and b through `f`.
template <class F>
std::vector<Tensor> run(F f, const Tensor& h, const Tensor& b) {
  Var vh = Var::leaf(h), vb = Var::leaf(b);
  const Var y = f(vh, vb);
  backward(test::weighted_sum(y));
  return {y.tensor(), vh.grad(), vb.grad()};
}
}  // namespace

TEST(BiasGelu, EqualsAddThenGeluBitForBit) {
  const auto plain_gelu = [](const Var& a, const Var& c) { return gelu(a + c); };
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor h = test::random_tensor({6, 4, 40}, 1).to(dtype), b = test::random_tensor({40}, 2).to(dtype);
    const auto fused = run(bias_gelu, h, b), plain = run(plain_gelu, h, b);
    for (std::size_t i = 0; i < fused.size(); ++i)
      EXPECT_TRUE(test::same_bits(fused[i], plain[i])) << dtype_name(dtype) << " output " << i;
    // A strided h runs the elementwise kernels' scalar loop, where add-then-gelu runs the dense
    // (vectorised, FMA-contracted) one on the stored sum: equal to rounding, not to the bit.
    const Tensor strided = test::random_tensor({40, 4, 6}, 3).to(dtype).permute({2, 1, 0});
    const auto fs = run(bias_gelu, strided, b), ps = run(plain_gelu, strided, b);
    for (std::size_t i = 0; i < fs.size(); ++i) EXPECT_LE(test::scaled_max_error(fs[i], ps[i]), 1e-6) << dtype_name(dtype);
  }
}

TEST(BiasGelu, GradientsMatchFiniteDifferencesAndBadBiasesAreRefused) {
  test::expect_gradients_match([](const std::vector<Var>& v) { return test::weighted_sum(bias_gelu(v[0], v[1])); },
                               {test::random_f64({3, 5}, 4), test::random_f64({5}, 5)});
  EXPECT_THROW(bias_gelu(Var(test::random_tensor({3, 5}, 6)), Var(test::random_tensor({3}, 7))), Error);
  EXPECT_THROW(bias_gelu(Var(test::random_tensor({3, 5}, 6)), Var(test::random_tensor({1, 5}, 7))), Error);
}

TEST(BiasGeluFusion, FusesLinearAndGeluAndLeavesNearMissesAlone) {
  const SymShape s{4, 8};
  auto graph_of = [&](const std::function<Var(const Var&, const Var&, const Var&)>& f) {
    return trace([&](const std::vector<Var>& in) { return std::vector<Var>{f(in[0], in[1], in[2])}; },
                 {{"h", s}, {"b", {8}}, {"full", s}});
  };
  const TracedFunction fused = graph_of([](const Var& h, const Var& b, const Var&) { return gelu(h + b); });
  const Graph after = fuse_bias_gelu(fused.graph());
  EXPECT_EQ(test::count_ops(after, "bias_gelu"), 1);
  EXPECT_EQ(after.nodes().size(), 1u);
  const std::vector<Tensor> in{test::random_tensor({4, 8}, 8), test::random_tensor({8}, 9), test::random_tensor({4, 8}, 10)};
  test::expect_same_results(fused.graph(), after, in, {});
  const std::vector<std::function<Var(const Var&, const Var&, const Var&)>> near_misses{
      [](const Var& h, const Var& b, const Var&) { const Var a = h + b; return gelu(a) + a; },  // the sum has another reader
      [](const Var& h, const Var&, const Var& full) { return gelu(h + full); },                   // not a bias
      [](const Var& h, const Var& b, const Var&) { return gelu(b + h); },                         // bias first
      [](const Var& h, const Var& b, const Var&) { return tanh(h + b); },                         // another activation
  };
  for (std::size_t i = 0; i < near_misses.size(); ++i) {
    const TracedFunction fn = graph_of(near_misses[i]);
    EXPECT_EQ(test::count_ops(fuse_bias_gelu(fn.graph()), "bias_gelu"), 0) << "near miss " << i;
  }
}

TEST(BiasGeluFusion, AnMlpTrainedAtLevelThreeGivesTheLevelOneBits) {
  Generator gen(4);
  MLP mlp(8, 16, gen);
  auto loss = [&](const std::vector<Var>& in) {
    const Var y = mlp(in[0]);
    return std::vector<Var>{mean(y * y)};
  };
  const std::vector<InputSpec> sig{{"x", {SymDim::symbol("batch"), 3, 8}}};
  const TracedFunction plain = trace(loss, sig).with_gradients();
  const TracedFunction fused = trace(loss, sig).optimized(3).with_gradients().optimized(3);
  EXPECT_EQ(test::count_ops(fused.graph(), "bias_gelu"), 2) << "the forward's, and its recomputation for the weight gradient";
  EXPECT_EQ(test::count_ops(fused.graph(), "bias_gelu_backward"), 1);
  EXPECT_EQ(test::count_ops(fused.graph(), "gelu") + test::count_ops(fused.graph(), "gelu_backward"), 0);
  const std::vector<Tensor> params = test::parameter_tensors(plain);
  const std::vector<Tensor> x{test::random_tensor({2, 3, 8}, 11)};
  const auto a = execute(plain.graph(), x, params), b = execute(fused.graph(), x, params);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(test::same_bits(a[i].contiguous(), b[i].contiguous())) << "output " << i;
}
