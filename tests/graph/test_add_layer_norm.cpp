// add_layer_norm, a residual add and the layer norm of its sum in one pass, and the level-3 pass
// that fuses them: the same bits as add-then-layer_norm, forward and backward (the residual
// stream's gradient is added inside layer_norm_backward), in f32 and f64, with the second operand
// full-size or repeated over leading dims; bad inputs are refused; near misses are left alone; a
// pre-norm residual stream trained at level 3 gives exactly the level-1 results.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
#include "troupe/kernels/layernorm.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
// The sum, y and the gradients wrt a, b, gamma, beta of a loss reading both the sum and y (so the
// sum's gradient has two parts, as in a residual stream).
template <class F>
std::vector<Tensor> run(F f, const Tensor& a, const Tensor& b, const Tensor& g, const Tensor& beta) {
  Var va = Var::leaf(a), vb = Var::leaf(b), vg = Var::leaf(g), vbeta = Var::leaf(beta);
  const AddLayerNorm r = f(va, vb, vg, vbeta);
  backward(test::weighted_sum(r.y, 1) + test::weighted_sum(r.sum, 2));
  return {r.sum.tensor(), r.y.tensor(), va.grad(), vb.grad(), vg.grad(), vbeta.grad()};
}
AddLayerNorm unfused(const Var& a, const Var& b, const Var& g, const Var& beta) {
  const Var s = a + b;
  return {s, layer_norm(s, g, beta)};
}
AddLayerNorm fused(const Var& a, const Var& b, const Var& g, const Var& beta) { return add_layer_norm(a, b, g, beta); }
}  // namespace

TEST(AddLayerNorm, EqualsAddThenLayerNormBitForBitWithItsGradients) {
  for (DType dtype : {DType::f32, DType::f64})
    for (const Shape& b_shape : {Shape{3, 5, 40}, Shape{5, 40}, Shape{40}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", b " + shape_str(b_shape));
      const Tensor a = test::random_tensor({3, 5, 40}, 1).to(dtype), b = test::random_tensor(b_shape, 2).to(dtype),
                   g = test::random_tensor({40}, 3).to(dtype), beta = test::random_tensor({40}, 4).to(dtype);
      const auto f = run(fused, a, b, g, beta), p = run(unfused, a, b, g, beta);
      for (std::size_t i = 0; i < f.size(); ++i) EXPECT_TRUE(test::same_bits(f[i], p[i])) << "result " << i;
    }
}

TEST(AddLayerNorm, GradientsMatchFiniteDifferencesAndNonFiniteValuesPropagate) {
  test::expect_gradients_match(
      [](const std::vector<Var>& v) {
        const AddLayerNorm r = add_layer_norm(v[0], v[1], v[2], v[3]);
        return test::weighted_sum(r.y, 1) + test::weighted_sum(r.sum, 2);
      },
      {test::random_f64({2, 3, 6}, 5), test::random_f64({3, 6}, 6), test::random_f64({6}, 7), test::random_f64({6}, 8)});
  Tensor a = test::random_tensor({2, 4}, 9);
  a.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  const auto r = kernels::add_layernorm(a, test::random_tensor({2, 4}, 10), Tensor::full({4}, 1.0), Tensor::zeros({4}));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(r.y.data<float>()[i])) << "the row with a NaN";
  for (int i = 4; i < 8; ++i) EXPECT_TRUE(std::isfinite(r.y.data<float>()[i])) << "the other row";
}

TEST(AddLayerNorm, BadInputsAreRefusedWithTheOpNamed) {
  const Tensor a = test::random_tensor({2, 3, 4}, 1), g = test::random_tensor({4}, 2);
  auto message = [&](const Tensor& b, const Tensor& gamma) {
    try {
      kernels::add_layernorm(a, b, gamma, gamma);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(test::random_tensor({2, 1, 4}, 3), g).find("add_layernorm: b has shape [2, 1, 4]"), std::string::npos);
  EXPECT_NE(message(test::random_tensor({3, 4}, 3), test::random_tensor({3}, 4)).find("gamma"), std::string::npos);
  EXPECT_THROW(kernels::add_layernorm(a, test::random_tensor({4}, 3).to(DType::f64), g, g), Error);
  EXPECT_THROW(add_layer_norm(Var(a), Var(test::random_tensor({3, 3}, 3)), Var(g), Var(g)), Error);
  const auto ln = kernels::layernorm(a, g, g);
  EXPECT_THROW(kernels::layernorm_backward(a, a, g, ln.mean, ln.rstd, test::random_tensor({3, 4}, 5)), Error);
}

TEST(AddLayerNormFusion, FusesAResidualAddAndLeavesNearMissesAlone) {
  using Body = std::function<std::vector<Var>(const Var&, const Var&, const Var&, const Var&)>;
  auto graph_of = [](const Body& f) {
    return trace([&](const std::vector<Var>& in) { return f(in[0], in[1], in[2], in[3]); },
                 {{"a", {2, 3, 4}}, {"b", {3, 4}}, {"g", {4}}, {"beta", {4}}});
  };
  const std::vector<Body> fusible{
      [](const Var& a, const Var& b, const Var& g, const Var& beta) { return std::vector<Var>{layer_norm(a + b, g, beta)}; },
      [](const Var& a, const Var& b, const Var& g, const Var& beta) {  // the sum read again, later
        const Var s = b + a;                                            // the repeated operand first
        return std::vector<Var>{tanh(layer_norm(s, g, beta)) + s, s};
      },
  };
  const std::vector<Tensor> in{test::random_tensor({2, 3, 4}, 1), test::random_tensor({3, 4}, 2), test::random_tensor({4}, 3),
                               test::random_tensor({4}, 4)};
  for (std::size_t i = 0; i < fusible.size(); ++i) {
    const TracedFunction fn = graph_of(fusible[i]);
    const Graph after = fuse_add_layer_norm(fn.graph());
    EXPECT_EQ(test::count_ops(after, "add_layer_norm"), 1) << "case " << i;
    EXPECT_EQ(test::count_ops(after, "add"), static_cast<int>(i)) << "case " << i;
    check_graph(after);
    test::expect_same_results(fn.graph(), after, in);
  }
  const std::vector<Body> near_misses{
      [](const Var& a, const Var& b, const Var& g, const Var& beta) {  // the sum read before the layer norm
        const Var s = a + b;
        const Var t = tanh(s);
        return std::vector<Var>{layer_norm(s, g, beta) + t};
      },
      [](const Var& a, const Var& b, const Var& g, const Var& beta) { return std::vector<Var>{layer_norm(a - b, g, beta)}; },
      [](const Var& a, const Var& b, const Var& g, const Var& beta) {  // [3, 1]: not made of a's last dims
        return std::vector<Var>{layer_norm(a + mean(b, {1}, true), g, beta)};
      },
  };
  for (std::size_t i = 0; i < near_misses.size(); ++i)
    EXPECT_EQ(test::count_ops(fuse_add_layer_norm(graph_of(near_misses[i]).graph()), "add_layer_norm"), 0) << "near miss " << i;
}

namespace {
// Embeddings summed, one pre-norm residual layer, a final layer norm: two adds a layer norm reads.
class ResidualStream : public Module {
 public:
  ResidualStream() {
    ln1_ = register_module("ln1", std::make_shared<LayerNorm>(16));
    mix_ = register_module("mix", std::make_shared<Linear>(16, 16, gen_));
    ln2_ = register_module("ln2", std::make_shared<LayerNorm>(16));
  }
  Var operator()(const Var& tokens, const Var& positions) {
    const Var s1 = tokens + positions;
    const Var s2 = s1 + tanh((*mix_)((*ln1_)(s1)));
    return mean((*ln2_)(s2) * s2);
  }

 private:
  Generator gen_{3};
  std::shared_ptr<LayerNorm> ln1_, ln2_;
  std::shared_ptr<Linear> mix_;
};
}  // namespace

TEST(AddLayerNormFusion, APreNormResidualStreamTrainedAtLevelThreeEqualsLevelOne) {
  ResidualStream model;
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{model(in[0], in[1])}; };
  const std::vector<InputSpec> sig{{"tokens", {SymDim::symbol("batch"), 8, 16}}, {"positions", {8, 16}}};
  const TracedFunction plain = trace(loss, sig).with_gradients();
  const TracedFunction fused = trace(loss, sig).optimized(3).with_gradients().optimized(3);
  EXPECT_EQ(test::count_ops(fused.graph(), "add_layer_norm"), 2);
  EXPECT_EQ(test::count_ops(fused.graph(), "add"), 0) << "no residual add forward, no gradient sum backward";
  int accumulating = 0;
  for (const Node& n : fused.graph().nodes()) accumulating += n.op == "layer_norm_backward" && n.inputs.size() == 6;
  EXPECT_EQ(accumulating, 2);
  const std::vector<Tensor> params = test::parameter_tensors(plain);
  const std::vector<Tensor> x{test::random_tensor({2, 8, 16}, 11), test::random_tensor({8, 16}, 12)};
  const auto a = execute(plain.graph(), x, params), b = execute(fused.graph(), x, params);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(test::same_bits(a[i], b[i])) << "output " << i;
}
