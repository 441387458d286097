// Finite-difference gradient checks, in f64, of every differentiable op, eager and traced,
// including broadcasting and values used more than once.
#include <gtest/gtest.h>

#include "graph/gradcheck.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/graph/ops.hpp"

using namespace troupe;
using namespace troupe::graph;
using test::expect_gradients_match;
using test::random_f64;
using test::weighted_sum;

namespace {
using Vars = std::vector<Var>;
}

TEST(OpGradients, BinaryWithBroadcasting) {
  const std::vector<Tensor> in{random_f64({2, 3, 4}, 1), random_f64({3, 1}, 2, 0.5, 2.0)};
  expect_gradients_match([](const Vars& v) { return weighted_sum(v[0] + v[1]); }, in);
  expect_gradients_match([](const Vars& v) { return weighted_sum(v[0] - v[1]); }, in);
  expect_gradients_match([](const Vars& v) { return weighted_sum(v[1] * v[0]); }, in);
  expect_gradients_match([](const Vars& v) { return weighted_sum(v[0] / v[1]); }, in);
  expect_gradients_match([](const Vars& v) { return weighted_sum(v[1] / v[0].reshape({6, 4}).reshape({2, 3, 4})); },
                         {random_f64({2, 3, 4}, 3, 0.5, 2.0), in[1]});
}

TEST(OpGradients, ScalarsAndUnary) {
  const std::vector<Tensor> any{random_f64({3, 5}, 4)}, positive{random_f64({3, 5}, 5, 0.2, 2.0)};
  expect_gradients_match([](const Vars& v) { return weighted_sum(2.5 * v[0] + 1.0 - v[0] / 4.0); }, any);
  expect_gradients_match([](const Vars& v) { return weighted_sum(3.0 - v[0]); }, any);
  expect_gradients_match([](const Vars& v) { return weighted_sum(-v[0]); }, any);
  expect_gradients_match([](const Vars& v) { return weighted_sum(exp(v[0])); }, any);
  expect_gradients_match([](const Vars& v) { return weighted_sum(tanh(v[0])); }, any);
  expect_gradients_match([](const Vars& v) { return weighted_sum(gelu(v[0])); }, any);
  expect_gradients_match([](const Vars& v) { return weighted_sum(silu(v[0])); }, any);
  expect_gradients_match([](const Vars& v) { return weighted_sum(log(v[0])); }, positive);
  expect_gradients_match([](const Vars& v) { return weighted_sum(sqrt(v[0])); }, positive);
  expect_gradients_match([](const Vars& v) { return weighted_sum(rsqrt(v[0])); }, positive);
  // relu is checked away from its kink at 0.
  Tensor mixed = random_f64({3, 5}, 6, 0.1, 1.0);
  for (std::int64_t i = 0; i < mixed.numel(); i += 2) mixed.data<double>()[i] *= -1;
  expect_gradients_match([](const Vars& v) { return weighted_sum(relu(v[0])); }, {mixed});
}

TEST(OpGradients, MatmulTransposesAndBatchBroadcast) {
  const Tensor a = random_f64({2, 3, 4}, 7), b = random_f64({4, 5}, 8), bt = random_f64({5, 4}, 9);
  const Tensor at = random_f64({2, 4, 3}, 10);
  expect_gradients_match([](const Vars& v) { return weighted_sum(matmul(v[0], v[1])); }, {a, b});
  expect_gradients_match([](const Vars& v) { return weighted_sum(matmul(v[0], v[1], false, true)); }, {a, bt});
  expect_gradients_match([](const Vars& v) { return weighted_sum(matmul(v[0], v[1], true, false)); }, {at, b});
  expect_gradients_match([](const Vars& v) { return weighted_sum(matmul(v[0], v[1], true, true)); }, {at, bt});
  expect_gradients_match([](const Vars& v) { return weighted_sum(matmul(v[0], v[1])); },
                         {random_f64({3, 4}, 11), random_f64({2, 4, 2}, 12)});
}

TEST(OpGradients, Reductions) {
  const std::vector<Tensor> x{random_f64({2, 3, 4}, 13)};
  expect_gradients_match([](const Vars& v) { return sum(v[0]); }, x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(sum(v[0], {1})); }, x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(mean(v[0], {0, 2}, true)); }, x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(max(v[0], {2})); }, x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(max(v[0], {0, 1}, true)); }, x);
  expect_gradients_match([](const Vars& v) { return mean(v[0]); }, x);
  expect_gradients_match([](const Vars& v) { return squared_norm(v[0]) * 0.5; }, x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(sum_to(v[0], v[1]) + broadcast_to(v[1], v[0]).reshape({24}).reshape({2, 3, 4}).permute({0, 1, 2}) * 0.0 + v[1]); },
                         {x[0], random_f64({3, 1}, 14)});
  expect_gradients_match([](const Vars& v) { return weighted_sum(broadcast_to(v[1], v[0])); },
                         {x[0], random_f64({1, 4}, 15)});
}

TEST(OpGradients, ShapeOps) {
  const std::vector<Tensor> x{random_f64({2, 3, 4}, 16)};
  expect_gradients_match([](const Vars& v) { return weighted_sum(v[0].reshape({4, -1})); }, x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(v[0].transpose(0, 2)); }, x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(v[0].permute({1, 2, 0}) * 2.0); }, x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(concat({v[0], v[1], v[0]}, 1)); },
                         {x[0], random_f64({2, 2, 4}, 17)});
  expect_gradients_match(
      [](const Vars& v) {
        auto parts = split(v[0], {1, 3}, 2);
        return weighted_sum(parts[1], 3) + weighted_sum(parts[0], 4);
      },
      x);
  expect_gradients_match([](const Vars& v) { return weighted_sum(split(v[0], {2, 1}, 1)[1]); }, x);  // one piece unused
  expect_gradients_match([](const Vars& v) { return weighted_sum(pixel_shuffle(v[0], 2)); },
                         {random_f64({1, 8, 2, 3}, 18)});
  expect_gradients_match([](const Vars& v) { return weighted_sum(pixel_unshuffle(v[0], 2)); },
                         {random_f64({1, 2, 4, 6}, 19)});
}

TEST(OpGradients, NeuralNetworkOps) {
  const Tensor x = random_f64({2, 3, 5}, 20);
  expect_gradients_match([](const Vars& v) { return weighted_sum(softmax(v[0])); }, {x});
  expect_gradients_match([](const Vars& v) { return weighted_sum(softmax(v[0], 1)); }, {x});
  expect_gradients_match([](const Vars& v) { return weighted_sum(log_softmax(v[0])); }, {x});
  expect_gradients_match([](const Vars& v) { return weighted_sum(layer_norm(v[0], v[1], v[2])); },
                         {x, random_f64({5}, 21), random_f64({5}, 22)});
  const Tensor ids = Tensor::from_vector<std::int64_t>({1, 0, 3, 1, 1, 2}, {2, 3});
  expect_gradients_match([](const Vars& v) { return weighted_sum(embedding(v[0], v[1])); },
                         {random_f64({4, 3}, 23), ids});
  const Tensor targets = Tensor::from_vector<std::int64_t>({4, 0, 2, 1, 3, 0}, {2, 3});
  expect_gradients_match([](const Vars& v) { return cross_entropy(v[0], v[1]); }, {x, targets});
  expect_gradients_match([](const Vars& v) { return mse_loss(v[0], v[1]); }, {x, random_f64({2, 3, 5}, 24)});
  expect_gradients_match([](const Vars& v) { return weighted_sum(softmax(causal_mask(v[0]))); },
                         {random_f64({2, 4, 4}, 25)});
}

TEST(OpGradients, Convolution) {
  const Tensor x = random_f64({2, 2, 5, 4}, 26), w = random_f64({3, 2, 3, 3}, 27), b = random_f64({3}, 28);
  expect_gradients_match([](const Vars& v) { return weighted_sum(conv2d(v[0], v[1], v[2], 1, 1)); }, {x, w, b});
  expect_gradients_match([](const Vars& v) { return weighted_sum(conv2d(v[0], v[1], 2, 0)); }, {x, w});
  expect_gradients_match([](const Vars& v) { return weighted_sum(conv2d(v[0], v[1], v[2], 2, 1)); }, {x, w, b});
}

TEST(OpGradients, FanOutAccumulates) {
  // x feeds three paths (and itself twice into one mul); every use must add to its gradient.
  expect_gradients_match(
      [](const Vars& v) {
        const Var h = tanh(v[0]);
        return weighted_sum(h * h + matmul(h, v[1]) * 0.5 + v[0]);
      },
      {random_f64({3, 3}, 29), random_f64({3, 3}, 30)});
}

TEST(OpGradients, StopGradientBlocksTheFlow) {
  Var x = Var::leaf(Tensor::from_vector<double>({1.0, 2.0, 3.0}, {3}), "x");
  backward(sum(stop_gradient(x) * x));  // d/dx = stop_gradient(x): the blocked path adds nothing
  EXPECT_EQ(test::values(x.grad()), (std::vector<double>{1.0, 2.0, 3.0}));
  Var y = Var::leaf(Tensor::from_vector<double>({1.0}, {1}), "y");
  EXPECT_THROW(backward(sum(stop_gradient(y))), Error);  // nothing requires a gradient any more
}

TEST(OpGradients, NoGradientForIntegersOrWithoutAsking) {
  Var w = Var::leaf(random_f64({4, 2}, 31), "w");
  Var ids(Tensor::from_vector<std::int64_t>({0, 3}, {2}));
  backward(sum(embedding(w, ids)));
  EXPECT_TRUE(w.grad().defined());
  EXPECT_THROW(Var::leaf(Tensor::from_vector<std::int64_t>({1}, {1})), Error);
  // Under NoGradGuard nothing is recorded, so there is nothing to differentiate.
  NoGradGuard off;
  EXPECT_THROW(backward(sum(w * 2.0)), Error);
}

TEST(OpGradients, GradientsAccumulateOverCalls) {
  Var x = Var::leaf(Tensor::from_vector<double>({1.0, -2.0}, {2}), "x");
  backward(sum(x * x));
  backward(sum(x * 3.0));
  EXPECT_EQ(test::values(x.grad()), (std::vector<double>{2.0 + 3.0, -4.0 + 3.0}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(OpGradients, BackwardRefusesNonScalarLoss) {
  Var x = Var::leaf(random_f64({2, 2}, 32), "x");
  try {
    backward(x * 2.0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 2]"), std::string::npos) << e.what();
  }
  backward(x * 2.0, Tensor::full({2, 2}, 1.0, DType::f64));  // with an explicit output gradient it works
  EXPECT_EQ(test::values(x.grad()), (std::vector<double>(4, 2.0)));
}

TEST(OpGradients, CastPassesTheGradientBackInTheInputDtype) {
  Var x = Var::leaf(Tensor::from_vector<float>({1.0f, -2.0f}, {2}), "x");
  backward(sum(cast(x, DType::f64) * Var(Tensor::from_vector<double>({3.0, 4.0}, {2}))));
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(test::values(x.grad()), (std::vector<double>{3.0, 4.0}));
  // Integers cast to floats are data: no gradient flows into them.
  Var ids(Tensor::from_vector<std::int64_t>({1, 2}, {2}));
  EXPECT_THROW(backward(sum(cast(ids, DType::f32))), Error);
}
