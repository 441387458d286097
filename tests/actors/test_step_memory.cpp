// A program at JIT level 3 plans its steps' memory (actors/src/step_memory.hpp): after the first
// step at a shape, every tensor an act makes, registers included, comes from one planned arena, so
// a steady-state step asks the allocator for nothing, with or without an optimizer, with several
// micro-batches in flight and several scheduler threads; the bits equal the plain executor's; a
// result the caller keeps is never overwritten; a new batch size plans once; a failed step leaves
// the plan usable.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "graph/pass_testing.hpp"
#include "step_memory.hpp"
#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/kernels/cpu_features.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::actors::Engine;
using troupe::actors::EngineOptions;
using troupe::actors::Program;
using troupe::actors::ProgramOptions;
using troupe::actors::StepResult;

namespace {
const SymDim kBatch = SymDim::symbol("batch");

// A GPT block's training loss, at level 3: fused attention and bias-gelu, gradients taken after.
struct BlockLoss {
  Generator gen{6};
  GPTBlock block{16, 2, gen, 32};
  TracedFunction fn;
  BlockLoss() {
    auto loss = [this](const std::vector<Var>& in) {
      const Var y = block(in[0]);
      return std::vector<Var>{mean(y * y)};
    };
    fn = trace(loss, {{"x", {kBatch, 8, 16}}}).optimized(3).with_gradients().optimized(3);
  }
};

StepResult run_step(Program& program, const std::vector<Tensor>& inputs) {
  auto future = program.run_async(inputs);
  EXPECT_EQ(future.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the step did not finish";
  return future.get();
}

// Allocator requests made by one step (the caller's result of the step before already dropped).
std::uint64_t requests_of(Program& program, const std::vector<Tensor>& inputs) {
  cpu_allocator().reset_stats();
  run_step(program, inputs);
  return cpu_allocator().stats().requests;
}

// input -> a -> {b, c} -> d: a diamond of actors, each the consumer of the ones before.
actors::ActorGraph diamond() {
  actors::ActorGraph plan;
  plan.actors.resize(5);
  const auto edge = [&](int from, int to) {
    plan.actors[static_cast<std::size_t>(from)].consumers.push_back(to);
    plan.actors[static_cast<std::size_t>(to)].producers.push_back(from);
  };
  edge(0, 1);
  edge(1, 2);
  edge(1, 3);
  edge(2, 4);
  edge(3, 4);
  return plan;
}

}  // namespace

// The order memory planning relies on: a producer's act before its consumers', an actor's
// micro-batches in turn, and with R registers micro-batch m + R of a producer after every read of
// micro-batch m; nothing else (parallel branches stay unordered).
TEST(StepMemory, TheProtocolsOrderOfActs) {
  const auto act = [](int actor, int mb) { return actors::ActOrder::act(actor, mb, 5); };
  for (int registers : {1, 2}) {
    SCOPED_TRACE(std::to_string(registers) + " registers");
    const actors::ActOrder order(diamond(), 3, registers);
    EXPECT_TRUE(order.before(act(1, 0), act(2, 0)));
    EXPECT_TRUE(order.before(act(0, 0), act(4, 0)));
    EXPECT_FALSE(order.before(act(2, 0), act(3, 0))) << "parallel branches";
    EXPECT_FALSE(order.before(act(3, 0), act(2, 0))) << "parallel branches";
    EXPECT_FALSE(order.before(act(2, 0), act(2, 0)));
    EXPECT_FALSE(order.before(act(4, 0), act(1, 0)));
    EXPECT_TRUE(order.before(act(2, 0), act(2, 1))) << "an actor's micro-batches in turn";
    EXPECT_FALSE(order.before(act(1, 1), act(4, 0))) << "the next micro-batch may run ahead of the sink";
    // a's register of micro-batch 0 is free for micro-batch R only once b and c have read it.
    EXPECT_EQ(order.before(act(3, 0), act(1, 1)), registers == 1);
    EXPECT_EQ(order.before(act(3, 0), act(2, 1)), registers == 1);
    EXPECT_TRUE(order.before(act(3, 0), act(1, 2)));
    EXPECT_EQ(order.before(act(4, 0), act(1, 1)), false) << "d reads b and c, not a";
  }
}

TEST(StepMemory, PlannedStepsComputeThePlainExecutorsBitsWithNoAllocatorCalls) {
  BlockLoss model;
  const std::vector<Tensor> inputs{test::random_tensor({2, 8, 16}, 3)};
  const std::vector<Tensor> plain = execute(model.fn.graph(), inputs, test::parameter_tensors(model.fn));
  for (std::size_t threads : {1u, 2u}) {
    SCOPED_TRACE(std::to_string(threads) + " scheduler threads");
    Engine engine(EngineOptions{threads});
    const auto program = engine.compile(model.fn, ProgramOptions{});
    for (int step = 0; step < 6; ++step) {
      const StepResult r = run_step(*program, inputs);
      EXPECT_TRUE(test::same_bits(r.outputs[0], plain[0])) << "step " << step;
      for (std::size_t k = 0; k < model.fn.gradient_parameters().size(); ++k) {
        const std::string& name = model.fn.parameters()[model.fn.gradient_parameters()[k]].name();
        EXPECT_TRUE(test::same_bits(r.gradients.at(name), plain[model.fn.output_count() + k])) << name << ", step " << step;
      }
    }
    EXPECT_EQ(requests_of(*program, inputs), 0u) << "a planned step asked the allocator";
    const auto report = program->memory_report();
    ASSERT_TRUE(report.has_value());
    std::cout << threads << " scheduler threads: " << report->blocks << " blocks, measured peak "
              << report->measured_peak_bytes << " B, planned " << report->planned_bytes << " B (unplanned sum "
              << report->unplanned_bytes << " B), " << report->memory_edges << " memory edges, " << report->plans_built
              << " plans built\n";
    EXPECT_GE(report->plans_built, 1u);
    EXPECT_GT(report->calls_served, 0u);
    EXPECT_LE(report->planned_bytes, report->unplanned_bytes);
    EXPECT_GT(report->planned_bytes, 0u);
  }
}

TEST(StepMemory, AResultTheCallerKeepsIsNeverOverwritten) {
  BlockLoss model;
  Engine engine;
  const auto program = engine.compile(model.fn, ProgramOptions{});
  const Tensor x = test::random_tensor({2, 8, 16}, 3), other = test::random_tensor({2, 8, 16}, 4);
  run_step(*program, {x});
  const StepResult kept = run_step(*program, {x});  // served from the plan, and held
  const Tensor loss = kept.outputs[0].clone();
  std::map<std::string, Tensor> gradients;
  for (const auto& [name, g] : kept.gradients) gradients[name] = g.clone();
  for (int step = 0; step < 3; ++step) run_step(*program, {other});
  EXPECT_TRUE(test::same_bits(kept.outputs[0], loss));
  for (const auto& [name, g] : gradients) EXPECT_TRUE(test::same_bits(kept.gradients.at(name), g)) << name;
}

TEST(StepMemory, TrainingWithAnOptimizerAndMicroBatchesInFlightMakesNoAllocatorCalls) {
  for (int micro_batches : {1, 2}) {
    for (int registers : {1, 2}) {
      SCOPED_TRACE(std::to_string(micro_batches) + " micro-batches, " + std::to_string(registers) + " registers");
      BlockLoss planned, reference;
      ProgramOptions options;
      options.micro_batches = micro_batches;
      options.registers = registers;
      options.clip_grad_norm = 0.05;  // small enough to clip: the scaling must not allocate either
      options.return_gradients = false;
      kernels::AdamWParams hp;
      hp.lr = 1e-2;
      options.optimizers = {std::make_shared<AdamW>(planned.fn.parameters(), hp)};
      Engine engine(EngineOptions{2});
      const auto program = engine.compile(planned.fn, options);
      // The same steps eagerly on a twin model: the losses agree while the parameters move.
      AdamW twin_optimizer(reference.block.parameters(), hp);
      const std::vector<Tensor> inputs{test::random_tensor({4, 8, 16}, 7)};
      for (int step = 0; step < 6; ++step) {
        const StepResult r = run_step(*program, inputs);
        EXPECT_TRUE(r.gradients.empty()) << "return_gradients is off";
        twin_optimizer.zero_grad();
        const Var y = reference.block(Var(inputs[0]));
        const Var loss = mean(y * y);
        backward(loss);
        clip_grad_norm(reference.block.parameters(), 0.05);
        twin_optimizer.step();
        EXPECT_NEAR(r.outputs[0].item(), loss.tensor().item(), 1e-5 * std::abs(loss.tensor().item())) << "step " << step;
      }
      EXPECT_EQ(requests_of(*program, inputs), 0u) << "a planned training step asked the allocator";
    }
  }
}

// Mixed precision O1 with dynamic loss scaling: the bf16 weights are written over the last step's
// and the scale is read in place, so a planned step still asks the allocator for nothing.
TEST(StepMemory, AMixedPrecisionStepMakesNoAllocatorCalls) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  Generator gen(6);
  GPTBlock block(16, 2, gen, 32);
  auto scaler = std::make_shared<GradScaler>();
  auto loss = [&](const std::vector<Var>& in) {
    const Var y = block(in[0]);
    return std::vector<Var>{mean(y * y)};
  };
  const TracedFunction fn = trace(loss, {{"x", {kBatch, 8, 16}}})
                                .with_amp({AmpLevel::O1, DType::bf16})
                                .optimized(3)
                                .with_gradients({}, scaler->scale_var())
                                .optimized(3);
  ProgramOptions options;
  options.micro_batches = 2;
  options.return_gradients = false;
  options.loss_scaler = scaler;
  kernels::AdamWParams hp;
  hp.lr = 1e-2;
  options.optimizers = {std::make_shared<AdamW>(block.parameters(), hp)};
  Engine engine(EngineOptions{2});
  const auto program = engine.compile(fn, options);
  const std::vector<Tensor> inputs{test::random_tensor({4, 8, 16}, 7)};
  double first = 0, last = 0;
  for (int step = 0; step < 4; ++step) {
    const StepResult r = run_step(*program, inputs);
    EXPECT_FALSE(r.skipped);
    (step == 0 ? first : last) = r.outputs[0].item();
  }
  EXPECT_LT(last, first) << "the steps did not train";
  EXPECT_EQ(requests_of(*program, inputs), 0u) << "a planned mixed-precision step asked the allocator";
}

TEST(StepMemory, ANewBatchSizePlansOnceAndStaysCorrect) {
  BlockLoss model;
  Engine engine;
  const auto program = engine.compile(model.fn, ProgramOptions{});
  const Tensor two = test::random_tensor({2, 8, 16}, 8), five = test::random_tensor({5, 8, 16}, 9);
  for (int round = 0; round < 3; ++round)
    for (const Tensor& x : {two, five}) {
      const StepResult r = run_step(*program, {x});
      const std::vector<Tensor> plain = execute(model.fn.graph(), {x}, test::parameter_tensors(model.fn));
      EXPECT_TRUE(test::same_bits(r.outputs[0], plain[0])) << "round " << round << ", " << x.size(0) << " rows";
    }
  EXPECT_EQ(program->memory_report()->plans_built, 2u) << "one plan per batch size, kept while both are in use";
  EXPECT_EQ(program->memory_report()->calls_served, 4u);
}

TEST(StepMemory, AFailedStepLeavesThePlanUsable) {
  Generator gen(12);
  Linear head(4, 5, gen);
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{cross_entropy(head(in[0]), in[1])}; };
  const TracedFunction fn = trace(loss, {{"x", {kBatch, 4}}, {"y", {kBatch}, DType::i64}}).optimized(3).with_gradients().optimized(3);
  Engine engine;
  const auto program = engine.compile(fn, ProgramOptions{});
  const Tensor x = test::random_tensor({3, 4}, 13);
  const Tensor good = Tensor::from_vector<std::int64_t>({0, 4, 2}, {3}), bad = Tensor::from_vector<std::int64_t>({0, 9, 2}, {3});
  const std::vector<Tensor> plain = execute(fn.graph(), {x, good}, test::parameter_tensors(fn));
  for (int step = 0; step < 3; ++step) run_step(*program, {x, good});
  EXPECT_THROW(run_step(*program, {x, bad}), Error);  // class 9 of 5: the loss op refuses it mid-step
  for (int step = 0; step < 3; ++step) {
    const StepResult r = run_step(*program, {x, good});
    EXPECT_TRUE(test::same_bits(r.outputs[0], plain[0])) << "step " << step << " after the failure";
  }
  EXPECT_EQ(requests_of(*program, {x, good}), 0u);
}

// Three MLPs in a row: each hidden activation (bias_gelu's output, 16 times wider than the stream)
// is read by its layer's weight gradient. Recomputed there, it is not held from the forward to the
// backward, so the planned step needs less memory, and computes the same loss.
TEST(StepMemory, RecomputationLowersThePlannedPeakOfATrainingStep) {
  struct Result {
    std::size_t planned;
    double loss;
  };
  const auto train = [](bool recompute) {
    Generator gen(3);
    Sequential net;
    for (int k = 0; k < 3; ++k) net.add(std::make_shared<MLP>(16, 256, gen));
    auto loss = [&](const std::vector<Var>& in) {
      const Var y = net(in[0]);
      return std::vector<Var>{mean(y * y)};
    };
    if (!recompute) setenv("TROUPE_DISABLE_PASSES", "recomputation", 1);
    const TracedFunction fn = trace(loss, {{"x", {kBatch, 32, 16}}}).optimized(3).with_gradients().optimized(3);
    unsetenv("TROUPE_DISABLE_PASSES");
    ProgramOptions options;
    options.return_gradients = false;
    kernels::AdamWParams hp;
    options.optimizers = {std::make_shared<AdamW>(fn.parameters(), hp)};
    Engine engine(EngineOptions{1});  // one scheduler thread: the recorded order, so the plan, is the same each run
    const auto program = engine.compile(fn, options);
    const std::vector<Tensor> inputs{test::random_tensor({8, 32, 16}, 9)};
    double last = 0.0;
    for (int step = 0; step < 3; ++step) last = run_step(*program, inputs).outputs[0].item();
    return Result{program->memory_report()->planned_bytes, last};
  };
  const Result with = train(true), without = train(false);
  EXPECT_EQ(with.loss, without.loss) << "recomputed values are the same bits";
  EXPECT_LT(with.planned + 256 * 1024, without.planned) << "at least one hidden activation (256 KiB) less";
}
