// Dynamic loss scaling (graph/grad_scaler.hpp) on the actor runtime: the scaler's arithmetic and
// state; a scaled step's gradients, norm and update equal the unscaled step's; a step with an Inf
// gradient is skipped (parameters untouched) and the scale backs off; with data parallelism a forced
// Inf on one rank only makes both ranks skip the same step; f16 gradients that overflow at the
// initial scale recover by backoff; mismatched programs are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/graph/grad_scaler.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::actors::Engine;
using troupe::actors::ProgramOptions;
using troupe::actors::StepResult;

namespace {

const SymShape kShape{SymDim::symbol("batch"), 6, 16};

// A GPT block trained with SGD on mse_loss(block(x), y), with or without a loss scaler.
struct Trainer {
  Generator gen{5};
  GPTBlock block{16, 2, gen};
  std::shared_ptr<GradScaler> scaler;
  std::unique_ptr<actors::Program> program;
  Trainer(Engine& engine, std::shared_ptr<GradScaler> s, double clip = 0,
          std::shared_ptr<transport::Communicator> comm = nullptr)
      : scaler(std::move(s)) {
    auto loss = [this](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(block(in[0]), in[1])}; };
    const TracedFunction f = trace(loss, {{"x", kShape}, {"y", kShape}});
    ProgramOptions po;
    kernels::SgdParams hp;
    hp.lr = 0.1;
    po.optimizers = {std::make_shared<SGD>(block.parameters(), hp)};
    po.clip_grad_norm = clip;
    po.micro_batches = 2;
    po.loss_scaler = scaler;
    po.data_parallel.communicator = std::move(comm);
    program = engine.compile(scaler ? f.with_gradients({}, scaler->scale_var()) : f.with_gradients(), po);
  }
  std::map<std::string, Tensor> params() const {
    std::map<std::string, Tensor> p;
    for (const auto& [name, v] : block.named_parameters()) p[name] = v.tensor().clone();
    return p;
  }
};

}  // namespace

TEST(GradScaler, GrowsBacksOffCountsAndRoundTripsItsState) {
  GradScaler s({.init_scale = 8, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
  EXPECT_EQ(s.scale(), 8);
  EXPECT_EQ(s.scale_var().tensor().item(), 8);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 8);
  s.update(false);  // the third clean step in a row
  EXPECT_EQ(s.scale(), 16);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(false);
  s.update(true);  // an Inf: back off, the run of clean steps starts over
  EXPECT_EQ(s.scale(), 8);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.scale_var().tensor().item(), 8);
  s.update(false);
  GradScaler restored;
  restored.load_state_dict(s.state_dict());
  EXPECT_EQ(restored.scale(), 8);
  EXPECT_EQ(restored.scale_var().tensor().item(), 8);
  EXPECT_EQ(restored.growth_tracker(), 1);
  EXPECT_EQ(restored.skipped_steps(), 1);
  // A scale that f32 cannot hold never comes from growth.
  GradScaler big({.init_scale = 1e38, .growth_factor = 8, .backoff_factor = 0.5, .growth_interval = 1});
  big.update(false);
  EXPECT_EQ(big.scale(), 1e38);
  // Bad options and states are refused, and a bad state changes nothing.
  EXPECT_THROW(GradScaler({.init_scale = 0}), Error);
  EXPECT_THROW(GradScaler({.init_scale = 1, .growth_factor = 1}), Error);
  EXPECT_THROW(GradScaler({.init_scale = 1, .growth_factor = 2, .backoff_factor = 1}), Error);
  EXPECT_THROW(GradScaler({.init_scale = 1, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 0}), Error);
  for (const auto& bad : std::vector<std::map<std::string, std::string>>{
           {{"scale", "nan"}, {"growth_tracker", "0"}, {"skipped", "0"}},
           {{"scale", "0"}, {"growth_tracker", "0"}, {"skipped", "0"}},
           {{"scale", "4"}, {"growth_tracker", "1.5"}, {"skipped", "0"}},
           {{"scale", "4"}, {"skipped", "0"}}}) {
    EXPECT_THROW(restored.load_state_dict(bad), Error);
    EXPECT_EQ(restored.scale(), 8);
  }
}

TEST(LossScaling, ScaledStepsEqualUnscaledOnesAndAnInfSkipsTheStep) {
  Engine engine;
  const Tensor x = test::random_tensor({4, 6, 16}, 1), y = test::random_tensor({4, 6, 16}, 2);
  for (double clip : {0.0, 0.05}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    Trainer plain(engine, nullptr, clip), scaled(engine, std::make_shared<GradScaler>(), clip);
    for (int step = 0; step < 3; ++step) {
      const StepResult a = plain.program->run({x, y}), b = scaled.program->run({x, y});
      EXPECT_FALSE(b.skipped);
      EXPECT_EQ(b.loss_scale, 65536);
      EXPECT_NEAR(b.outputs[0].item(), a.outputs[0].item(), 1e-6 * std::abs(a.outputs[0].item()));
      if (clip > 0) {
        EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm);
      }
      for (const auto& [name, g] : a.gradients) EXPECT_LE(test::scaled_max_error(b.gradients.at(name), g), 1e-5) << name;
    }
    for (const auto& [name, p] : plain.params()) EXPECT_LE(test::scaled_max_error(scaled.params().at(name), p), 1e-5);
    // An Inf in the input makes the gradients Inf: the step is skipped, the scale halves.
    Tensor bad = x.clone();
    bad.data<float>()[3] = std::numeric_limits<float>::infinity();
    const auto before = scaled.params();
    const StepResult r = scaled.program->run({bad, y});
    EXPECT_TRUE(r.skipped);
    EXPECT_FALSE(std::isfinite(r.grad_norm));
    EXPECT_EQ(scaled.scaler->scale(), 32768);
    EXPECT_EQ(scaled.scaler->skipped_steps(), 1);
    for (const auto& [name, p] : before) EXPECT_TRUE(test::scaled_max_error(scaled.params().at(name), p) == 0) << name;
    // The next clean step trains again, at the new scale.
    const StepResult next = scaled.program->run({x, y});
    EXPECT_FALSE(next.skipped);
    EXPECT_EQ(next.loss_scale, 32768);
    EXPECT_GT(test::scaled_max_error(scaled.params().begin()->second, before.begin()->second), 0);
  }
}

TEST(LossScaling, AnInfOnOneRankMakesEveryRankSkipTheSameStep) {
  auto transports = transport::make_inprocess_world(2);
  Engine engine(actors::EngineOptions{2});
  const Tensor x = test::random_tensor({4, 6, 16}, 1), y = test::random_tensor({4, 6, 16}, 2);
  std::vector<std::vector<bool>> skipped(2);
  std::vector<std::vector<double>> scales(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto comm = std::make_shared<transport::Communicator>(std::move(transports[static_cast<std::size_t>(r)]),
                                                            "allreduce", 0, 256);
      Trainer t(engine, std::make_shared<GradScaler>(), 0.05, comm);
      for (int step = 0; step < 4; ++step) {
        Tensor mine = x.slice(0, 2 * r, 2 * r + 2).clone();
        if (step == 1 && r == 1) mine.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();  // rank 1 only
        const StepResult res = t.program->run({mine, y.slice(0, 2 * r, 2 * r + 2).contiguous()});
        skipped[static_cast<std::size_t>(r)].push_back(res.skipped);
        scales[static_cast<std::size_t>(r)].push_back(t.scaler->scale());
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(skipped[0], (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(skipped[1], skipped[0]);
  EXPECT_EQ(scales[1], scales[0]);
  EXPECT_EQ(scales[0][1], 32768);
}

// f16 gradients at the initial scale 2^16 overflow f16 (largest 65504); the scaler backs off until
// they fit, then the steps train.
TEST(LossScaling, OverflowingF16GradientsRecoverByBackoff) {
  Var w = Var::leaf(test::random_tensor({4, 16, 16}, 4), "w");
  auto loss = [&](const std::vector<Var>& in) {
    // The activations and their gradients are f16: the backward's product of the scale and
    // d(loss)/dh, ~50 here, exceeds 65504 until the scale is below ~1300.
    const Var h = cast(cast(in[0], DType::f16) * cast(w, DType::f16), DType::f32);
    return std::vector<Var>{mean(h * h) * 1000.0};
  };
  auto scaler = std::make_shared<GradScaler>();
  ProgramOptions po;
  kernels::SgdParams hp;
  hp.lr = 1e-6;
  po.optimizers = {std::make_shared<SGD>(std::vector<Var>{w}, hp)};
  po.loss_scaler = scaler;
  Engine engine;
  auto program = engine.compile(trace(loss, {{"x", {4, 16, 16}}}).with_gradients({}, scaler->scale_var()), po);
  const Tensor x = test::random_tensor({4, 16, 16}, 5);
  int skipped = 0;
  bool trained = false;
  for (int step = 0; step < 12 && !trained; ++step) {
    const StepResult r = program->run({x});
    if (r.skipped) ++skipped;
    trained = !r.skipped;
  }
  EXPECT_TRUE(trained);
  EXPECT_GT(skipped, 0);
  EXPECT_EQ(scaler->skipped_steps(), skipped);
  EXPECT_EQ(scaler->scale(), 65536 / std::pow(2.0, skipped));
}

TEST(LossScaling, MismatchedProgramsAreRefused) {
  Generator gen(1);
  Linear lin(4, 4, gen);
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mean(lin(in[0]))}; };
  const TracedFunction f = trace(loss, {{"x", {2, 4}}});
  auto scaler = std::make_shared<GradScaler>(), other = std::make_shared<GradScaler>();
  Engine engine;
  ProgramOptions po;
  po.loss_scaler = scaler;
  EXPECT_THROW(engine.compile(f.with_gradients(), po), Error);                           // not seeded by it
  EXPECT_THROW(engine.compile(f.with_gradients({}, other->scale_var()), po), Error);     // another scaler's
  EXPECT_THROW(engine.compile(f.with_gradients({}, scaler->scale_var()), ProgramOptions{}), Error);  // scaled, no scaler
  EXPECT_THROW(f.with_gradients({}, Var(test::random_tensor({2}, 1))), Error);          // not 0-d
}
