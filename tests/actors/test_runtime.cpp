// The actor runtime: actor-graph steps equal eager execution for a GPT block and a conv net under
// several register and micro-batch counts; optimizers run as actors; failures reach the caller and
// leave the program usable; bad input is refused; shutdown with queued steps does not hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "graph/models.hpp"
#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::actors::Engine;
using troupe::actors::ProgramOptions;
using troupe::actors::StepResult;

namespace {
constexpr auto kTimeout = std::chrono::seconds(60);

StepResult wait(std::future<StepResult> f) {
  EXPECT_EQ(f.wait_for(kTimeout), std::future_status::ready) << "the step did not finish";
  return f.get();
}

// Runs mse_loss(model(x), target) eagerly and as actor programs with every register/micro-batch
// combination; loss and every parameter gradient must agree.
void expect_actor_steps_match_eager(Layer& model, const Tensor& x, const Tensor& target) {
  auto loss_fn = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(model(in[0]), in[1])}; };
  const Var eager_loss = loss_fn({Var(x), Var(target)})[0];
  backward(eager_loss);
  std::map<std::string, Tensor> eager_grads;
  for (const auto& [name, p] : model.named_parameters()) eager_grads[name] = p.grad();
  model.zero_grad();

  SymShape x_shape = to_sym(x.shape()), t_shape = to_sym(target.shape());
  x_shape[0] = t_shape[0] = SymDim::symbol("batch");
  const TracedFunction step = trace(loss_fn, {{"x", x_shape}, {"target", t_shape}}).with_gradients();
  Engine engine;
  for (int registers : {1, 2, 4})
    for (int micro_batches : {1, 4}) {
      SCOPED_TRACE("registers " + std::to_string(registers) + ", micro-batches " + std::to_string(micro_batches));
      ProgramOptions options;
      options.registers = registers;
      options.micro_batches = micro_batches;
      auto program = engine.compile(step, options);
      for (int repeat = 0; repeat < 2; ++repeat) {  // the compiled graph is reused
        const StepResult r = wait(program->run_async({x, target}));
        ASSERT_EQ(r.outputs.size(), 1u);
        EXPECT_LE(test::scaled_max_error(r.outputs[0], eager_loss.tensor()), 1e-6);
        ASSERT_EQ(r.gradients.size(), eager_grads.size());
        for (const auto& [name, g] : eager_grads) EXPECT_LE(test::scaled_max_error(r.gradients.at(name), g), 1e-6) << name;
      }
    }
}

// Registered once: an op that fails on negative input, to inject kernel failures mid-step.
std::vector<ValueInfo> infer_same(const InferContext& c) { return {c.inputs[0]}; }
std::vector<Tensor> fail_if_negative(const std::vector<Tensor>& in, const ComputeContext&) {
  for (double v : test::values(in[0]))
    if (v < 0) fail(ErrorKind::out_of_range, "test kernel saw a negative value");
  return {in[0]};
}
TROUPE_DEFINE_OP({.name = "test_fail_if_negative", .infer = infer_same, .compute = fail_if_negative,
                  .grad = [](const GradContext& c) -> std::vector<Var> { return {c.grad_output(0)}; }});
}  // namespace

TEST(Runtime, GptBlockStepsEqualEager) {
  Generator gen(1);
  GPTBlock block(16, 2, gen);
  expect_actor_steps_match_eager(block, test::random_tensor({4, 6, 16}, 2), test::random_tensor({4, 6, 16}, 3));
}

TEST(Runtime, ConvNetStepsEqualEager) {
  Generator gen(4);
  expect_actor_steps_match_eager(*test::small_conv_net(gen), test::random_tensor({4, 3, 5, 5}, 5),
                                 test::random_tensor({4, 3, 10, 10}, 6));
}

TEST(Runtime, OptimizerActorsTrainLikeEagerSteps) {
  Generator g1(7), g2(7);
  Linear eager_model(3, 2, g1), actor_model(3, 2, g2);
  const Tensor x = test::random_tensor({8, 3}, 8), t = test::random_tensor({8, 2}, 9);
  kernels::AdamWParams hp;
  hp.lr = 0.05;
  AdamW eager_opt(eager_model.parameters(), hp);
  auto actor_opt = std::make_shared<AdamW>(actor_model.parameters(), hp);
  auto loss_fn = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(actor_model(in[0]), in[1])}; };
  Engine engine;
  ProgramOptions options;
  options.optimizers = {actor_opt};
  options.micro_batches = 2;
  auto program = engine.compile(trace(loss_fn, {{"x", {SymDim::symbol("batch"), 3}}, {"t", {SymDim::symbol("batch"), 2}}}).with_gradients(), options);
  EXPECT_EQ(program->actor_counts().at("optimizer"), 1);
  EXPECT_EQ(program->actor_counts().at("gradient"), 2);
  for (int step = 0; step < 3; ++step) {
    eager_opt.zero_grad();
    backward(mse_loss(eager_model(Var(x)), Var(t)));
    eager_opt.step();
    const StepResult r = wait(program->run_async({x, t}));
    EXPECT_EQ(r.step, static_cast<std::uint64_t>(step + 1));
  }
  EXPECT_LE(test::scaled_max_error(actor_model.weight.tensor(), eager_model.weight.tensor()), 1e-6);
  EXPECT_LE(test::scaled_max_error(actor_model.bias.tensor(), eager_model.bias.tensor()), 1e-6);
  // A parameter without an optimizer is refused at compile time.
  auto partial = std::make_shared<SGD>(std::vector<Var>{actor_model.weight}, kernels::SgdParams{});
  ProgramOptions bad;
  bad.optimizers = {partial};
  EXPECT_THROW(engine.compile(trace(loss_fn, {{"x", {SymDim::symbol("batch"), 3}}, {"t", {SymDim::symbol("batch"), 2}}}).with_gradients(), bad), Error);
}

// Mixed precision O1 and O2 on actors: the casts of the weights run once per step, before the
// micro-batches (no actor of their own), and the steps give the traced function's loss and
// gradients, whatever the micro-batching.
TEST(Runtime, MixedPrecisionCastsEachWeightOncePerStep) {
  for (AmpLevel level : {AmpLevel::O1, AmpLevel::O2}) {
    SCOPED_TRACE(to_string(level));
    Generator gen(3);
    GPTBlock block(16, 2, gen);
    const Tensor x = test::random_tensor({4, 6, 16}, 1), t = test::random_tensor({4, 6, 16}, 2);
    auto loss_fn = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(block(in[0]), in[1])}; };
    const SymShape shape{SymDim::symbol("batch"), 6, 16};
    const TracedFunction step = trace(loss_fn, {{"x", shape}, {"t", shape}}).with_amp({level, DType::bf16}).with_gradients();
    const Graph& g = step.graph();
    int weight_casts = 0;
    for (const Node& n : g.nodes())
      if (n.op == "cast" && g.value(n.inputs[0]).kind == ValueKind::parameter) ++weight_casts;
    // qkv, attention projection, MLP in and out; at O2 their biases too (layernorm's stay f32).
    EXPECT_EQ(weight_casts, level == AmpLevel::O1 ? 4 : 8);
    const std::vector<Tensor> reference = step({x, t});
    std::map<std::string, Tensor> reference_grads;
    for (const auto& [name, p] : block.named_parameters()) reference_grads[name] = p.grad().clone();
    Engine engine;
    for (int micro_batches : {1, 2}) {
      SCOPED_TRACE("micro-batches " + std::to_string(micro_batches));
      ProgramOptions options;
      options.micro_batches = micro_batches;
      auto program = engine.compile(step, options);
      EXPECT_EQ(program->actor_counts().at("op"), static_cast<int>(g.nodes().size()) - weight_casts);
      for (int repeat = 0; repeat < 2; ++repeat) {
        const StepResult r = wait(program->run_async({x, t}));
        EXPECT_LE(test::scaled_max_error(r.outputs[0], reference[0]), micro_batches == 1 ? 1e-6 : 1e-2);
        for (const auto& [name, grad] : reference_grads)
          EXPECT_LE(test::scaled_max_error(r.gradients.at(name), grad), micro_batches == 1 ? 1e-6 : 3e-2) << name;
      }
    }
  }
}

// Global-norm clipping inside the program (both ways of taking the norm; the coefficient applied to
// the gradients returned with the result, or only inside the optimizer's update when none are)
// equals eager backward + clip_grad_norm + SGD, and reports the norm before clipping. (SGD rather
// than Adam: Adam turns the rounding noise of the attention's key-bias gradient, which is zero in
// exact arithmetic, into full-size steps.)
TEST(Runtime, ClippedStepsEqualEagerClipAndSgd) {
  for (auto [mode, returned] : {std::pair{actors::ClipMode::parallel, true}, std::pair{actors::ClipMode::naive, true},
                                std::pair{actors::ClipMode::parallel, false}}) {
    SCOPED_TRACE(std::string(mode == actors::ClipMode::parallel ? "parallel" : "naive") + (returned ? ", returned" : ""));
    Generator g1(12), g2(12);
    GPTBlock eager_model(16, 2, g1), actor_model(16, 2, g2);
    const Tensor x = test::random_tensor({4, 6, 16}, 13), t = test::random_tensor({4, 6, 16}, 14);
    kernels::SgdParams hp;
    hp.lr = 0.5;
    hp.momentum = 0.9;
    SGD eager_opt(eager_model.parameters(), hp);
    auto loss_fn = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(actor_model(in[0]), in[1])}; };
    Engine engine;
    ProgramOptions options;
    options.optimizers = {std::make_shared<SGD>(actor_model.parameters(), hp)};
    options.micro_batches = 2;
    options.clip_grad_norm = 0.05;  // well below the norm, so every step clips
    options.clip_mode = mode;
    options.return_gradients = returned;
    auto program = engine.compile(trace(loss_fn, {{"x", {SymDim::symbol("batch"), 6, 16}}, {"t", {SymDim::symbol("batch"), 6, 16}}}).with_gradients(), options);
    for (int step = 0; step < 3; ++step) {
      eager_opt.zero_grad();
      backward(mse_loss(eager_model(Var(x)), Var(t)));
      const double eager_norm = clip_grad_norm(eager_model.parameters(), 0.05);
      double clipped = 0;
      for (const Var& p : eager_model.parameters()) clipped += kernels::squared_norm(p.grad());
      EXPECT_NEAR(std::sqrt(clipped), 0.05, 1e-6);
      eager_opt.step();
      const StepResult r = wait(program->run_async({x, t}));
      EXPECT_NEAR(r.grad_norm, eager_norm, 1e-6 * eager_norm);
      EXPECT_GT(r.grad_norm, 0.05);
    }
    for (const auto& [name, p] : actor_model.named_parameters())
      EXPECT_LE(test::scaled_max_error(p.tensor(), eager_model.state_dict().at(name)), 1e-5) << name;
  }
  // Clipping needs gradients, and a sensible threshold.
  Generator gen(15);
  Linear lin(2, 2, gen);
  auto fwd = [&](const std::vector<Var>& in) { return std::vector<Var>{mean(lin(in[0]))}; };
  Engine engine;
  ProgramOptions options;
  options.clip_grad_norm = 1.0;
  EXPECT_THROW(engine.compile(trace(fwd, {{"x", {2, 2}}}), options), Error);
  options.clip_grad_norm = -1.0;
  EXPECT_THROW(engine.compile(trace(fwd, {{"x", {2, 2}}}).with_gradients(), options), Error);
}

TEST(Runtime, AFailingKernelFailsTheStepAndTheNextStepRuns) {
  Generator gen(10);
  Linear lin(4, 4, gen);
  auto fn = [&](const std::vector<Var>& in) {
    const Var h = apply1("test_fail_if_negative", {in[0]});
    return std::vector<Var>{mean(lin(h) * lin(in[0]))};  // a mean: micro-batch averages equal it
  };
  Engine engine;
  ProgramOptions options;
  options.micro_batches = 2;
  auto program = engine.compile(trace(fn, {{"x", {-1, 4}}}).with_gradients(), options);
  Tensor good = test::random_tensor({4, 4}, 11, 0.1, 1.0);
  Tensor bad = good.clone();
  bad.data<float>()[13] = -1.0f;  // in the second micro-batch
  auto failing = program->run_async({bad});
  ASSERT_EQ(failing.wait_for(kTimeout), std::future_status::ready) << "a failed step must not hang";
  try {
    failing.get();
    FAIL() << "the step should have failed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_range);
    const std::string what = e.what();
    EXPECT_NE(what.find("test_fail_if_negative"), std::string::npos) << what;
    EXPECT_NE(what.find("micro-batch 1"), std::string::npos) << what;
    EXPECT_NE(what.find("negative value"), std::string::npos) << what;
  }
  const StepResult ok = wait(program->run_async({good}));
  EXPECT_EQ(ok.gradients.size(), 2u);
  NoGradGuard no_grad;
  EXPECT_LE(test::scaled_max_error(ok.outputs[0], fn({Var(good)})[0].tensor()), 1e-6);
}

TEST(Runtime, BadInputsAreRefusedWithoutBreakingTheProgram) {
  Generator gen(12);
  Linear lin(3, 2, gen);
  auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{lin(in[0])}; };
  Engine engine;
  ProgramOptions options;
  options.micro_batches = 2;
  auto program = engine.compile(trace(fn, {{"x", {-1, 3}}}), options);
  EXPECT_THROW(wait(program->run_async({test::random_tensor({4, 5}, 1)})), Error);  // wrong width
  EXPECT_EQ(wait(program->run_async({test::random_tensor({3, 3}, 1)})).outputs[0].shape(), (Shape{3, 2}));  // 2 + 1 rows
  const Tensor x = test::random_tensor({6, 3}, 2);
  const StepResult r = program->run({x});
  EXPECT_EQ(r.outputs[0].shape(), (Shape{6, 2}));  // non-scalar outputs are concatenated
  NoGradGuard no_grad;
  EXPECT_LE(test::scaled_max_error(r.outputs[0], lin(Var(x)).tensor()), 1e-6);
  ProgramOptions no_registers;
  no_registers.registers = 0;
  EXPECT_THROW(engine.compile(trace(fn, {{"x", {-1, 3}}}), no_registers), Error);
}

TEST(Runtime, ShutdownWithQueuedStepsDoesNotHang) {
  Generator gen(13);
  Linear lin(16, 16, gen);
  auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{sum(lin(lin(in[0])))}; };
  std::vector<std::future<StepResult>> futures;
  {
    Engine engine(actors::EngineOptions{1, 64});
    auto program = engine.compile(trace(fn, {{"x", {-1, 16}}}).with_gradients());
    for (int i = 0; i < 20; ++i) futures.push_back(program->run_async({test::random_tensor({32, 16}, 14)}));
  }  // program and engine go away with steps still queued
  int finished = 0, cancelled = 0;
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(kTimeout), std::future_status::ready);
    try {
      f.get();
      ++finished;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos) << e.what();
      ++cancelled;
    }
  }
  EXPECT_EQ(finished + cancelled, 20);
}
