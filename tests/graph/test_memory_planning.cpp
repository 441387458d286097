// JIT level 3 plans memory: after its first call at an input shape a traced function runs in a
// planned arena with no allocator calls, computing the same bits as the plain executor; a new
// batch size plans once; the cache of plans is bounded; elementwise ops write over dying inputs.
#include <gtest/gtest.h>

#include <iostream>

#include "graph/models.hpp"
#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
const SymDim kBatch = SymDim::symbol("batch");

// Calls `fn` until its plan exists, then once more counting allocator requests; expects none and
// the plain executor's bits for the function's own outputs.
void expect_planned_and_exact(const std::string& name, const TracedFunction& fn, const std::vector<Tensor>& inputs) {
  for (int warmup = 0; warmup < 2; ++warmup) fn(inputs);
  cpu_allocator().reset_stats();
  const std::vector<Tensor> planned = fn(inputs);
  EXPECT_EQ(cpu_allocator().stats().requests, 0u) << name << ": a planned call asked the allocator";
  const std::vector<Tensor> plain = execute(fn.graph(), inputs, test::parameter_tensors(fn));
  for (std::size_t k = 0; k < planned.size(); ++k)
    EXPECT_TRUE(test::same_bits(planned[k], plain[k])) << name << ": output " << k << " differs";
  const MemoryPlanReport r = fn.memory_report();
  std::cout << name << ": " << r.blocks << " blocks, measured peak " << r.measured_peak_bytes << " B, planned "
            << r.planned_bytes << " B (unplanned sum " << r.unplanned_bytes << " B)\n";
  EXPECT_LE(r.planned_bytes, r.unplanned_bytes);
  EXPECT_GT(r.calls_served, 0u);
}

}  // namespace

TEST(MemoryPlanning, GptBlockInferenceRunsInItsArena) {
  Generator gen(5);
  GPTBlock block(16, 2, gen, 32);
  auto forward = [&](const std::vector<Var>& in) { return std::vector<Var>{block(in[0])}; };
  const TracedFunction fn = trace(forward, {{"x", {kBatch, 8, 16}}}).optimized(3);
  expect_planned_and_exact("gpt block inference", fn, {test::random_tensor({3, 8, 16}, 1)});
}

TEST(MemoryPlanning, SrLikeInferenceRunsInItsArena) {
  for (bool custom : {false, true}) {
    test::SrLike net(custom);
    auto forward = [&](const std::vector<Var>& in) { return std::vector<Var>{net(in[0])}; };
    const TracedFunction fn = trace(forward, {{"x", {kBatch, 3, 12, 12}}}).optimized(3);
    expect_planned_and_exact(custom ? "sr-like inference (custom relu)" : "sr-like inference", fn,
                             {test::random_tensor({2, 3, 12, 12}, 2)});
  }
}

TEST(MemoryPlanning, TrainingStepsAccumulateExactGradientsWithoutAllocatorCalls) {
  Generator gen(6);
  GPTBlock block(16, 2, gen, 32);
  auto loss = [&](const std::vector<Var>& in) {
    const Var y = block(in[0]);
    return std::vector<Var>{mean(y * y)};
  };
  const TracedFunction fn = trace(loss, {{"x", {kBatch, 8, 16}}}).optimized(3).with_gradients().optimized(3);
  const std::vector<Tensor> inputs{test::random_tensor({2, 8, 16}, 3)};
  const std::vector<Tensor> plain = execute(fn.graph(), inputs, test::parameter_tensors(fn));
  for (int step = 0; step < 4; ++step) {
    for (const Var& p : fn.parameters()) p.zero_grad();
    cpu_allocator().reset_stats();
    const std::vector<Tensor> out = fn(inputs);
    if (step >= 2) {
      EXPECT_EQ(cpu_allocator().stats().requests, 0u) << "step " << step;
    }
    EXPECT_TRUE(test::same_bits(out[0], plain[0]));
    for (std::size_t k = 0; k < fn.gradient_parameters().size(); ++k)
      EXPECT_TRUE(test::same_bits(fn.parameters()[fn.gradient_parameters()[k]].grad(), plain[fn.output_count() + k]))
          << "gradient " << k << ", step " << step;
  }
  // Without zeroing, gradients add up in place, still without allocator calls.
  const Tensor before = fn.parameters()[fn.gradient_parameters()[0]].grad().clone();
  cpu_allocator().reset_stats();
  fn(inputs);
  EXPECT_EQ(cpu_allocator().stats().requests, 0u);
  const Tensor twice = fn.parameters()[fn.gradient_parameters()[0]].grad();
  EXPECT_TRUE(test::same_bits(twice, kernels::add(before, plain[fn.output_count()])));
}

TEST(MemoryPlanning, ANewBatchSizePlansOnceAndStaysCorrect) {
  test::SrLike net(false);
  auto forward = [&](const std::vector<Var>& in) { return std::vector<Var>{net(in[0])}; };
  const TracedFunction fn = trace(forward, {{"x", {kBatch, 3, 8, 8}}}).optimized(3);
  const Tensor one = test::random_tensor({1, 3, 8, 8}, 4), three = test::random_tensor({3, 3, 8, 8}, 5);
  for (int round = 0; round < 3; ++round)
    for (const Tensor& x : {one, three}) {
      const Tensor y = fn({x})[0];
      EXPECT_TRUE(test::same_bits(y, execute(fn.graph(), {x}, test::parameter_tensors(fn))[0])) << "round " << round;
    }
  EXPECT_EQ(fn.memory_report().plans_built, 2u) << "one plan per batch size, kept while both are in use";
  EXPECT_EQ(fn.memory_report().calls_served, 4u);
}

TEST(MemoryPlanning, ThePlanCacheIsBoundedAndEvictsTheOldest) {
  ArenaLayoutCache cache(3);
  int calls = 0;
  for (std::int64_t n = 1; n <= 5; ++n) cache.run({{n}}, [&] { Tensor::empty({n * 16}); ++calls; });
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.report().plans_built, 5u);
  cache.run({{5}}, [&] { Tensor::empty({80}); });
  EXPECT_EQ(cache.report().plans_built, 5u) << "the newest shape kept its plan";
  cache.run({{1}}, [&] { Tensor::empty({16}); });
  EXPECT_EQ(cache.report().plans_built, 6u) << "the oldest shape was evicted and plans again";
  EXPECT_EQ(calls, 5);
}

TEST(MemoryPlanning, ACallThatThrowsLeavesNoPlanBehind) {
  ArenaLayoutCache cache;
  EXPECT_THROW(cache.run({{2}}, [] {
    Tensor::empty({4});
    throw std::runtime_error("op failed");
  }),
               std::runtime_error);
  EXPECT_EQ(cache.report().plans_built, 0u);
  cache.run({{2}}, [] { Tensor::empty({4}); });
  EXPECT_EQ(cache.report().plans_built, 1u);
}

TEST(MemoryPlanning, ElementwiseOpsWriteOverInputsThatDieThere) {
  auto chain = [](const std::vector<Var>& in) {
    Var h = in[0] * 2.0;
    h = relu(h + 1.0);
    h = gelu(h) * h;  // gelu(h) needs a new buffer (h is read again); the mul then takes one
    return std::vector<Var>{tanh(h) + in[0]};
  };
  const TracedFunction fn = trace(chain, {{"x", {4, 64}}});
  const Tensor x = test::random_tensor({4, 64}, 7);
  const Tensor x_before = x.clone();
  cpu_allocator().reset_stats();
  const Tensor plain = execute(fn.graph(), {x}, {})[0];
  const std::uint64_t plain_requests = cpu_allocator().stats().requests;
  cpu_allocator().reset_stats();
  const Tensor reused = execute(fn.graph(), {x}, {}, {}, true)[0];
  const std::uint64_t reused_requests = cpu_allocator().stats().requests;
  EXPECT_TRUE(test::same_bits(plain, reused));
  EXPECT_TRUE(test::same_bits(x, x_before)) << "a graph input was written over";
  EXPECT_EQ(plain_requests, 7u);
  EXPECT_EQ(reused_requests, 2u) << "only x * 2 and gelu(h) need new buffers";
}
