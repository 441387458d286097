// matmul_bias, a product and its bias in one GEMM, and the level-3 pass that fuses a Linear layer
// into it: within rounding of matmul-then-add forward (the GEMM may add the bias before its last
// K-block), the same gradients, in f32 and f64; near misses are left alone; a small MLP trained at
// level 3 stays within 1e-6 of level 1.
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
// y and the gradients of weighted_sum(y) wrt x, w and b through `f`.
template <class F>
std::vector<Tensor> run(F f, const Tensor& x, const Tensor& w, const Tensor& b) {
  Var vx = Var::leaf(x), vw = Var::leaf(w), vb = Var::leaf(b);
  const Var y = f(vx, vw, vb);
  backward(test::weighted_sum(y));
  return {y.tensor(), vx.grad(), vw.grad(), vb.grad()};
}
Var fused(const Var& x, const Var& w, const Var& b) { return matmul_bias(x, w, b, false, true); }
Var unfused(const Var& x, const Var& w, const Var& b) { return matmul(x, w, false, true) + b; }
}  // namespace

TEST(MatmulBias, EqualsMatmulThenAddAndHasItsGradients) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (std::int64_t k : {40, 1100}) {  // within one K-block, and over several
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", K = " + std::to_string(k));
      const Tensor x = test::random_tensor({6, 4, k}, 1).to(dtype), w = test::random_tensor({24, k}, 2).to(dtype),
                   b = test::random_tensor({24}, 3).to(dtype);
      const auto f = run(fused, x, w, b), p = run(unfused, x, w, b);
      EXPECT_LE(test::scaled_max_error(f[0], p[0]), dtype == DType::f32 ? 1e-6 : 1e-14);
      for (std::size_t i = 1; i < f.size(); ++i) EXPECT_TRUE(test::same_bits(f[i], p[i])) << "gradient " << i;
    }
  }
}

TEST(MatmulBias, GradientsMatchFiniteDifferencesAndBadInputsAreRefused) {
  test::expect_gradients_match(
      [](const std::vector<Var>& v) { return test::weighted_sum(matmul_bias(v[0], v[1], v[2])); },
      {test::random_f64({2, 3, 4}, 4), test::random_f64({4, 5}, 5), test::random_f64({5}, 6)});
  const Var x(test::random_tensor({3, 4}, 7)), w(test::random_tensor({4, 5}, 8));
  EXPECT_THROW(matmul_bias(x, w, Var(test::random_tensor({4}, 9))), Error);     // not the last dim
  EXPECT_THROW(matmul_bias(x, w, Var(test::random_tensor({1, 5}, 9))), Error);  // not a vector
  EXPECT_THROW(matmul_bias(x, w, Var(test::random_tensor({5}, 9).to(DType::f64))), Error);
  EXPECT_THROW(matmul_bias(Var(x.tensor().to(DType::bf16)), Var(w.tensor().to(DType::bf16)),
                           Var(test::random_tensor({5}, 9).to(DType::bf16)), false, false, DType::f32),
               Error);  // the bias must be in the result's dtype
}

TEST(MatmulBiasFusion, FusesALinearLayerAndLeavesNearMissesAlone) {
  const SymShape s{4, 8};
  auto graph_of = [&](const std::function<Var(const Var&, const Var&, const Var&, const Var&)>& f) {
    return trace([&](const std::vector<Var>& in) { return std::vector<Var>{f(in[0], in[1], in[2], in[3])}; },
                 {{"x", s}, {"w", {6, 8}}, {"b", {6}}, {"full", {4, 6}}});
  };
  const TracedFunction linear = graph_of([](const Var& x, const Var& w, const Var& b, const Var&) { return unfused(x, w, b); });
  const Graph after = fuse_matmul_bias(linear.graph());
  EXPECT_EQ(test::count_ops(after, "matmul_bias"), 1);
  EXPECT_EQ(after.nodes().size(), 1u);
  const std::vector<Tensor> in{test::random_tensor({4, 8}, 8), test::random_tensor({6, 8}, 9), test::random_tensor({6}, 10),
                               test::random_tensor({4, 6}, 11)};
  test::expect_same_results(linear.graph(), after, in, {});  // K = 8: one block, the same bits
  const std::vector<std::function<Var(const Var&, const Var&, const Var&, const Var&)>> near_misses{
      [](const Var& x, const Var& w, const Var& b, const Var&) { const Var y = matmul(x, w, false, true); return (y + b) * y; },  // another reader
      [](const Var& x, const Var& w, const Var&, const Var& full) { return matmul(x, w, false, true) + full; },  // not a bias
      [](const Var& x, const Var& w, const Var& b, const Var&) { return b + matmul(x, w, false, true); },       // bias first
      [](const Var& x, const Var& w, const Var& b, const Var&) { return matmul(x, w, false, true) - b; },       // not an add
      [](const Var& x, const Var& w, const Var& b, const Var&) { return gelu(matmul(x, w, false, true) + b); }, // bias_gelu's, after its pass
  };
  for (std::size_t i = 0; i < near_misses.size(); ++i) {
    const TracedFunction fn = graph_of(near_misses[i]);
    EXPECT_EQ(test::count_ops(fuse_matmul_bias(fuse_bias_gelu(fn.graph())), "matmul_bias"), 0) << "near miss " << i;
  }
}

TEST(MatmulBiasFusion, AnMlpTrainedAtLevelThreeStaysWithinRoundingOfLevelOne) {
  Generator gen(4);
  MLP mlp(8, 300, gen);  // the second layer's K = 300 spans GEMM blocks
  auto loss = [&](const std::vector<Var>& in) {
    const Var y = mlp(in[0]);
    return std::vector<Var>{mean(y * y)};
  };
  const std::vector<InputSpec> sig{{"x", {SymDim::symbol("batch"), 3, 8}}};
  const TracedFunction plain = trace(loss, sig).with_gradients();
  const TracedFunction fused = trace(loss, sig).optimized(3).with_gradients().optimized(3);
  EXPECT_EQ(test::count_ops(fused.graph(), "matmul_bias"), 1) << "the output projection; the first layer is bias_gelu's";
  const std::vector<Tensor> params = test::parameter_tensors(plain);
  const std::vector<Tensor> x{test::random_tensor({2, 3, 8}, 11)};
  const auto a = execute(plain.graph(), x, params), b = execute(fused.graph(), x, params);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LE(test::scaled_max_error(a[i], b[i]), 1e-6) << "output " << i;
}
