// Custom gradients: custom_relu and a user-given subgraph backward, eager and traced; single-op
// overrides; the inference graph keeps only the forward.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/gradcheck.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/custom_gradient.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
const Tensor kX = Tensor::from_vector<double>({-2.0, -0.5, 0.0, 0.5, 3.0}, {5});
const Tensor kUpstream = Tensor::from_vector<double>({1.0, 2.0, 3.0, 4.0, 5.0}, {5});

// d/dx of sum(custom_relu(x) * upstream), computed eagerly.
std::vector<double> eager_custom_relu_grad(double slope) {
  Var x = Var::leaf(kX.clone(), "x");
  backward(sum(custom_relu(x, slope) * Var(kUpstream)));
  return test::values(x.grad());
}
}  // namespace

TEST(CustomGradient, CustomReluForwardIsReluBackwardLeaks) {
  Var x = Var::leaf(kX.clone(), "x");
  const Var y = custom_relu(x);
  EXPECT_EQ(test::values(y.tensor()), (std::vector<double>{0.0, 0.0, 0.0, 0.5, 3.0}));
  backward(sum(y * Var(kUpstream)));
  const auto g = test::values(x.grad());
  const std::vector<double> expected{0.01, 0.02, 0.03, 4.0, 5.0};  // x <= 0 passes 0.01 x the gradient
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], expected[i]) << i;
  const auto g5 = eager_custom_relu_grad(0.5);
  EXPECT_DOUBLE_EQ(g5[0], 0.5);
  EXPECT_DOUBLE_EQ(g5[4], 5.0);
}

TEST(CustomGradient, TracedMatchesEager) {
  Var x = Var::leaf(kX.clone(), "x");
  auto fn = trace([&](const std::vector<Var>& in) { return std::vector<Var>{sum(custom_relu(x) * in[0])}; },
                  {{"upstream", {5}, DType::f64}})
                .with_gradients();
  fn({kUpstream});
  EXPECT_EQ(test::values(x.grad()), eager_custom_relu_grad(0.01));
  // The graph marks the region, and its backward is the user's (relu_backward with slope 0.01).
  const std::string dump = fn.graph().dump();
  EXPECT_NE(dump.find("relu(%1) {custom_gradient=custom_relu}"), std::string::npos) << dump;
  EXPECT_NE(dump.find("relu_backward("), std::string::npos) << dump;
  EXPECT_NE(dump.find("slope=0.01"), std::string::npos) << dump;
}

TEST(CustomGradient, InferenceGraphHasAPlainRelu) {
  Var x = Var::leaf(kX.clone(), "x");
  auto fn = trace([&](const std::vector<Var>& in) { return std::vector<Var>{sum(custom_relu(x) * in[0])}; },
                  {{"upstream", {5}, DType::f64}})
                .with_gradients();
  const Graph inference = fn.graph().inference_graph();
  const std::string dump = inference.dump();
  EXPECT_NE(dump.find("= relu(%1) :"), std::string::npos) << dump;
  EXPECT_EQ(dump.find("custom"), std::string::npos) << dump;
  EXPECT_EQ(dump.find("backward"), std::string::npos) << dump;
  EXPECT_TRUE(inference.regions().empty());
}

TEST(CustomGradient, SubgraphBackwardReplacesTheForwardsRules) {
  // A numerically stable log(1 + exp(x)) forward, given the analytic gradient sigmoid(x) as backward;
  // the backward deliberately scales by 2 so the test can tell it was used.
  auto softplus = [](const Var& x) {
    return custom_gradient(
        "softplus",
        [](const std::vector<Var>& in) { return std::vector<Var>{log(exp(in[0]) + 1.0)}; },
        [](const GradContext& c) {
          return std::vector<Var>{c.grad_output(0) * 2.0 / (exp(-c.inputs[0]) + 1.0)};
        },
        {x})[0];
  };
  const Tensor xv = test::random_f64({4}, 3);
  Var x = Var::leaf(xv.clone(), "x");
  backward(sum(softplus(x)));
  const auto eager = test::values(x.grad());
  for (std::size_t i = 0; i < eager.size(); ++i) {
    const double xi = test::values(xv)[i];
    EXPECT_NEAR(eager[i], 2.0 / (1.0 + std::exp(-xi)), 1e-12);
  }
  x.zero_grad();
  trace([&](const std::vector<Var>&) { return std::vector<Var>{sum(softplus(x))}; }, {}).with_gradients()({});
  const auto traced = test::values(x.grad());
  for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_NEAR(traced[i], eager[i], 1e-12);
}

TEST(CustomGradient, SingleOpOverrideWithARegisteredRule) {
  // Straight-through: the gradient of relu becomes the identity, the forward stays relu.
  Var x = Var::leaf(kX.clone(), "x");
  {
    GradientOverride ste("relu", kStraightThrough);
    const Var y = relu(x);
    EXPECT_EQ(test::values(y.tensor())[0], 0.0);
    backward(sum(y * Var(kUpstream)));
  }
  EXPECT_EQ(test::values(x.grad()), test::values(kUpstream));
  x.zero_grad();
  auto fn = trace(
      [&](const std::vector<Var>&) {
        GradientOverride ste("relu", kStraightThrough);
        return std::vector<Var>{sum(relu(x) * Var(kUpstream))};
      },
      {});
  EXPECT_NE(fn.graph().dump().find("gradient=straight_through"), std::string::npos);
  fn.with_gradients()({});
  EXPECT_EQ(test::values(x.grad()), test::values(kUpstream));
  EXPECT_THROW(GradientOverride("relu", "no_such_rule"), Error);
}

TEST(CustomGradient, BadUseIsRefused) {
  Var x = Var::leaf(kX.clone(), "x");
  auto nested = [](const Var& v) {
    return custom_gradient(
        "outer", [](const std::vector<Var>& in) { return std::vector<Var>{custom_relu(in[0])}; },
        [](const GradContext& c) { return std::vector<Var>{c.grad_output(0)}; }, {v})[0];
  };
  try {
    trace([&](const std::vector<Var>&) { return std::vector<Var>{sum(nested(x))}; }, {});
    FAIL() << "nested custom gradients must be refused when traced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
  }
  // A backward returning the wrong shape is caught, naming the function.
  auto wrong = [](const Var& v) {
    return custom_gradient(
        "wrong", [](const std::vector<Var>& in) { return std::vector<Var>{in[0] * 2.0}; },
        [](const GradContext& c) { return std::vector<Var>{sum(c.grad_output(0))}; }, {v})[0];
  };
  try {
    backward(sum(wrong(x)));
    FAIL() << "a mis-shaped custom gradient must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong"), std::string::npos) << e.what();
  }
}
