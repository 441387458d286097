// Optimizers: parameter groups, per-parameter state and steps, resuming from a state dict, refusing
// bad input, and actually training a small model; learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference.hpp"
#include "expect_error.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/lr_schedule.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
Var param(const std::string& name, std::vector<double> v) {
  return Var::leaf(Tensor::from_vector<double>(v, {static_cast<std::int64_t>(v.size())}), name);
}
void set_grad(const Var& p, std::vector<double> g) {
  p.set_grad(Tensor::from_vector<double>(g, {static_cast<std::int64_t>(g.size())}));
}
}  // namespace

TEST(Optim, SgdGroupsUseTheirOwnHyperParameters) {
  Var a = param("a", {1.0, 2.0}), b = param("b", {1.0});
  kernels::SgdParams slow, fast;
  slow.lr = 0.1;
  fast.lr = 1.0;
  fast.momentum = 0.5;
  SGD sgd({{{a}, slow}, {{b}, fast}});
  set_grad(a, {1.0, -1.0});
  set_grad(b, {2.0});
  sgd.step();
  EXPECT_EQ(test::values(a.tensor()), (std::vector<double>{0.9, 2.1}));
  EXPECT_DOUBLE_EQ(test::values(b.tensor())[0], -1.0);
  sgd.step();  // b's velocity: 0.5 * 2 + 2 = 3
  EXPECT_DOUBLE_EQ(test::values(b.tensor())[0], -4.0);
  sgd.zero_grad();
  sgd.step();  // no gradients: nothing moves
  EXPECT_DOUBLE_EQ(test::values(b.tensor())[0], -4.0);
  EXPECT_DOUBLE_EQ(sgd.lr(1), 1.0);
}

TEST(Optim, AdamWFirstStepMovesByLearningRate) {
  Var a = param("a", {1.0, -1.0});
  kernels::AdamWParams p;
  p.lr = 0.1;
  p.weight_decay = 0.0;
  AdamW adam({a}, p);
  set_grad(a, {3.0, -0.5});
  adam.step();  // bias-corrected first step: lr * sign(g) (up to eps)
  const auto v = test::values(a.tensor());
  EXPECT_NEAR(v[0], 0.9, 1e-7);
  EXPECT_NEAR(v[1], -0.9, 1e-7);
  const auto state = adam.state_dict();
  EXPECT_EQ(test::values(state.at("a.step"))[0], 1.0);
  EXPECT_NEAR(test::values(state.at("a.exp_avg"))[0], 0.3, 1e-12);
  EXPECT_NEAR(test::values(state.at("a.exp_avg_sq"))[0], 0.009, 1e-12);
  EXPECT_DOUBLE_EQ(test::values(state.at("group0.lr"))[0], 0.1);
}

TEST(Optim, ResumingFromAStateDictContinuesExactly) {
  auto run = [](int steps_before, bool resume) {
    Var a = param("w", {0.5, -0.25, 2.0});
    AdamW first({a}, kernels::AdamWParams{});
    auto grads = [&](int k) { set_grad(a, {0.1 * k, -0.2, 0.3 / k}); };
    for (int k = 1; k <= steps_before; ++k) {
      grads(k);
      first.step();
    }
    if (!resume) {
      grads(steps_before + 1);
      first.step();
      return test::values(a.tensor());
    }
    AdamW second({a}, kernels::AdamWParams{});
    second.load_state_dict(first.state_dict());
    grads(steps_before + 1);
    second.step();
    return test::values(a.tensor());
  };
  EXPECT_EQ(run(3, true), run(3, false));
}

TEST(Optim, BadInputIsRefused) {
  Var a = param("a", {1.0}), unnamed = param("", {1.0});
  EXPECT_THROW(SGD({a, a}, kernels::SgdParams{}), Error);
  EXPECT_THROW(SGD({Var(Tensor::zeros({1}))}, kernels::SgdParams{}), Error);
  EXPECT_THROW(SGD({unnamed}, kernels::SgdParams{}), Error);
  SGD sgd({a}, kernels::SgdParams{});
  set_grad(a, {1.0, 2.0});
  EXPECT_THROW(sgd.step(), Error);  // gradient of the wrong shape
  EXPECT_THROW(sgd.load_state_dict({}), Error);
  EXPECT_THROW(sgd.load_state_dict({{"group0.lr", Tensor::scalar(0.1, DType::f64)}, {"b.momentum_buffer", Tensor::zeros({1})}}),
               Error);
  EXPECT_DOUBLE_EQ(test::values(a.tensor())[0], 1.0);
}

// A damaged optimizer state is refused whole, naming the entry, and the optimizer keeps its own.
TEST(Optim, DamagedStateIsRefusedNamingTheEntry) {
  Var w = param("w", {1.0, 2.0});
  AdamW adam({w}, kernels::AdamWParams{});
  set_grad(w, {0.5, -0.5});
  adam.step();
  const std::map<std::string, Tensor> good = adam.state_dict();
  const auto refused = [&](std::map<std::string, Tensor> state, const std::string& mention) {
    try {
      adam.load_state_dict(state);
      ADD_FAILURE() << "expected a refusal mentioning " << mention;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  };
  auto with = [&](const std::string& key, const Tensor& t) {
    auto s = good;
    s[key] = t;
    return s;
  };
  auto without = [&](const std::string& key) {
    auto s = good;
    s.erase(key);
    return s;
  };
  refused(with("group0.lr", Tensor::empty({0}, DType::f64)), "'group0.lr' must be one floating-point number");
  refused(with("group0.lr", Tensor::full({2}, 0.1, DType::f64)), "'group0.lr' must be one floating-point number");
  refused(with("group0.lr", Tensor::scalar(std::nan(""), DType::f64)), "finite and non-negative");
  refused(with("group0.lr", Tensor::scalar(-1e-3, DType::f64)), "finite and non-negative");
  refused(with("group0.lr", Tensor::from_vector<std::int64_t>({1}, {1})), "floating-point");
  refused(with("w.step", Tensor::from_vector<std::int64_t>({-4}, {1})), "cannot be negative");
  refused(with("w.step", Tensor::full({1}, 1.0)), "'w.step' must be one i64");
  refused(with("w.exp_avg", Tensor::zeros({3})), "'w.exp_avg'");
  refused(with("w.exp_avg_sq", Tensor::zeros({2}, DType::f32)), "'w.exp_avg_sq'");
  refused(without("w.exp_avg_sq"), "has 2 of its 3 state entries");
  refused(without("w.step"), "has 2 of its 3 state entries");
  refused(with("w.extra", Tensor::zeros({2})), "'w.extra' belongs to no parameter");
  // Nothing of a refused state was taken: the learning rate and moments are those of the good state.
  EXPECT_EQ(adam.lr(), good.at("group0.lr").to(DType::f64).data<double>()[0]);
  const auto after = adam.state_dict();
  EXPECT_EQ(test::values(after.at("w.exp_avg")), test::values(good.at("w.exp_avg")));
  EXPECT_EQ(after.at("w.step").data<std::int64_t>()[0], 1);
  // A never-stepped parameter (no state at all) is fine.
  adam.load_state_dict({{"group0.lr", Tensor::scalar(0.01, DType::f64)}});
  EXPECT_DOUBLE_EQ(adam.lr(), 0.01);
}

TEST(Optim, TrainsARegressionToLowLoss) {
  Generator gen(3);
  Linear model(3, 1, gen);
  const Tensor x = test::random_tensor({32, 3}, 4);
  const Tensor w_true = Tensor::from_vector<float>({1.5f, -2.0f, 0.5f}, {1, 3});
  Tensor y;
  {
    NoGradGuard no_grad;
    y = (matmul(Var(x), Var(w_true), false, true) + 0.25).tensor();
  }
  kernels::AdamWParams p;
  p.lr = 0.05;
  p.weight_decay = 0.0;
  AdamW adam(model.parameters(), p);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    adam.zero_grad();
    const Var loss = mse_loss(model(Var(x)), Var(y));
    backward(loss);
    adam.step();
    (step == 0 ? first : last) = test::values(loss.tensor())[0];
  }
  EXPECT_GT(first, 0.5);
  EXPECT_LT(last, 1e-4);
  EXPECT_NEAR(test::values(model.weight.tensor())[1], -2.0, 1e-2);
  EXPECT_NEAR(test::values(model.bias.tensor())[0], 0.25, 1e-2);
}

// clip_grad_norm scales gradients to the threshold exactly when above it, leaves them alone below
// it, skips parameters without gradients and returns the norm before clipping.
TEST(Optim, ClipGradNormScalesToTheThreshold) {
  Var a = Var::leaf(Tensor::from_vector<float>({3, 4}, {2}), "a");
  Var b = Var::leaf(Tensor::from_vector<float>({0, 12}, {2}), "b");
  Var unused = Var::leaf(Tensor::from_vector<float>({1}, {1}), "unused");
  a.set_grad(Tensor::from_vector<float>({3, 4}, {2}));
  b.set_grad(Tensor::from_vector<float>({0, 12}, {2}));  // global norm sqrt(9 + 16 + 144) = 13
  EXPECT_NEAR(clip_grad_norm({a, b, unused}, 100.0), 13.0, 1e-9);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{3, 4}));  // below the threshold: unchanged
  EXPECT_NEAR(clip_grad_norm({a, b, unused}, 1.3), 13.0, 1e-9);
  const auto ga = a.grad().to_vector<float>(), gb = b.grad().to_vector<float>();
  EXPECT_NEAR(ga[0], 0.3, 1e-6);
  EXPECT_NEAR(ga[1], 0.4, 1e-6);
  EXPECT_NEAR(gb[1], 1.2, 1e-6);
  EXPECT_FALSE(unused.grad().defined());
  EXPECT_THROW(clip_grad_norm({a}, 0.0), Error);
}

// nanoGPT's curve: a linear warm-up to the peak, a half cosine to the floor, the floor after.
TEST(LrSchedule, WarmsUpThenDecaysToTheFloor) {
  const LrSchedule cosine{LrDecay::cosine, 4, 12, 0.1};
  EXPECT_DOUBLE_EQ(cosine.lr(1.0, 0), 0.0);
  EXPECT_DOUBLE_EQ(cosine.lr(1.0, 1), 0.25);
  EXPECT_DOUBLE_EQ(cosine.lr(1.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(cosine.lr(1.0, 8), 0.1 + 0.9 * 0.5);  // half-way down
  EXPECT_NEAR(cosine.lr(1.0, 6), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_DOUBLE_EQ(cosine.lr(1.0, 12), 0.1);
  EXPECT_DOUBLE_EQ(cosine.lr(1.0, 1000), 0.1);
  const LrSchedule linear{LrDecay::linear, 0, 10, 0.0};
  EXPECT_DOUBLE_EQ(linear.lr(2.0, 1), 2.0 * 0.9);
  EXPECT_DOUBLE_EQ(linear.lr(2.0, 5), 1.0);
  EXPECT_DOUBLE_EQ(linear.lr(2.0, 10), 0.0);
  const LrSchedule warmup_only{LrDecay::constant, 2, 0, 0.0};
  EXPECT_TRUE(warmup_only.active());
  EXPECT_DOUBLE_EQ(warmup_only.lr(0.5, 1), 0.25);
  EXPECT_DOUBLE_EQ(warmup_only.lr(0.5, 99), 0.5);
  EXPECT_FALSE(LrSchedule{}.active());
  EXPECT_EQ(parse_lr_decay("cosine"), LrDecay::cosine);
  EXPECT_STREQ(lr_decay_name(LrDecay::linear), "linear");
}

TEST(LrSchedule, SettingsThatDescribeNoScheduleAreRefused) {
  test::expect_error_mentions([] { parse_lr_decay("exp"); }, {"unknown learning-rate schedule 'exp'", "cosine"});
  test::expect_error_mentions([] { LrSchedule{LrDecay::cosine, 0, 10, 0.5}.lr(0.1, 1); },
                              {"floor 0.5", "peak rate 0.1", "--min-lr"});
  test::expect_error_mentions([] { LrSchedule{LrDecay::linear, 10, 10, 0}.lr(0.1, 1); },
                              {"linear decay ends at step 10", "10 warm-up steps"});
  test::expect_error_mentions([] { LrSchedule{LrDecay::constant, -1, 0, 0}.check(0.1); }, {"warm-up of -1 steps"});
}
