// Micro-batches that the batch does not divide: 3 rows in 2 micro-batches run as 2 + 1, 5 rows in 3
// as 2 + 2 + 1, each micro-batch weighted by its share of the rows, so the loss and every gradient
// of a mean loss equal one micro-batch's; a batch of fewer rows than micro-batches runs one row per
// micro-batch; other outputs are concatenated in row order; inputs that cannot be split are refused.
#include <gtest/gtest.h>

#include <chrono>

#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::actors::Engine;
using troupe::actors::ProgramOptions;
using troupe::actors::StepResult;

namespace {
const SymDim kBatch = SymDim::symbol("batch");

StepResult run_with(Engine& engine, const TracedFunction& fn, int micro_batches, const std::vector<Tensor>& inputs) {
  ProgramOptions options;
  options.micro_batches = micro_batches;
  const auto program = engine.compile(fn, options);
  auto future = program->run_async(inputs);
  EXPECT_EQ(future.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the step did not finish";
  return future.get();
}

// Every output and gradient of `fn` on `inputs` with each count in `counts` equals one micro-batch (1e-6
// relative to each tensor's largest value).
void expect_equal_to_one_micro_batch(const TracedFunction& fn, const std::vector<Tensor>& inputs,
                                     const std::vector<int>& counts) {
  Engine engine;
  const StepResult whole = run_with(engine, fn, 1, inputs);
  for (int m : counts) {
    SCOPED_TRACE(std::to_string(inputs[0].size(0)) + " rows in " + std::to_string(m) + " micro-batches");
    const StepResult r = run_with(engine, fn, m, inputs);
    ASSERT_EQ(r.outputs.size(), whole.outputs.size());
    for (std::size_t k = 0; k < whole.outputs.size(); ++k) {
      ASSERT_EQ(r.outputs[k].shape(), whole.outputs[k].shape());
      EXPECT_LE(test::scaled_max_error(r.outputs[k], whole.outputs[k]), 1e-6) << "output " << k;
    }
    ASSERT_EQ(r.gradients.size(), whole.gradients.size());
    for (const auto& [name, g] : whole.gradients) EXPECT_LE(test::scaled_max_error(r.gradients.at(name), g), 1e-6) << name;
  }
}

Tensor class_targets(std::int64_t rows, std::int64_t classes) {
  std::vector<std::int64_t> t;
  for (std::int64_t i = 0; i < rows; ++i) t.push_back((i * 7 + 3) % classes);
  return Tensor::from_vector(t, {rows});
}
}  // namespace

TEST(MicroBatches, UnevenSplitsOfLinearCrossEntropyEqualOneMicroBatch) {
  Generator gen(21);
  Linear lin(4, 5, gen);
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{cross_entropy(lin(in[0]), in[1])}; };
  const TracedFunction fn = trace(loss, {{"x", {kBatch, 4}}, {"y", {kBatch}, DType::i64}}).with_gradients();
  for (std::int64_t rows : {3, 5})
    expect_equal_to_one_micro_batch(fn, {test::random_tensor({rows, 4}, 22), class_targets(rows, 5)}, {2, 3});
  // A batch of fewer rows than micro-batches runs one row per micro-batch.
  expect_equal_to_one_micro_batch(fn, {test::random_tensor({2, 4}, 23), class_targets(2, 5)}, {3, 8});
  expect_equal_to_one_micro_batch(fn, {test::random_tensor({1, 4}, 24), class_targets(1, 5)}, {2});
}

// A mean over rows × positions (a language model's loss): each micro-batch still weighs by its rows.
TEST(MicroBatches, UnevenSplitsOfASequenceLossEqualOneMicroBatch) {
  Generator gen(25);
  Linear lin(4, 6, gen);
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{cross_entropy(lin(in[0]), in[1])}; };
  const TracedFunction fn = trace(loss, {{"x", {kBatch, 7, 4}}, {"y", {kBatch, 7}, DType::i64}}).with_gradients();
  for (std::int64_t rows : {3, 5})
    expect_equal_to_one_micro_batch(
        fn, {test::random_tensor({rows, 7, 4}, 26), class_targets(rows * 7, 6).reshape({rows, 7})}, {2, 3});
}

TEST(MicroBatches, UnevenSplitsOfAnMlpMseEqualOneMicroBatch) {
  Generator gen(27);
  Sequential mlp;
  mlp.add(std::make_shared<Linear>(4, 8, gen)).add(std::make_shared<ReLU>()).add(std::make_shared<Linear>(8, 3, gen));
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(mlp(in[0]), in[1])}; };
  const TracedFunction fn = trace(loss, {{"x", {kBatch, 4}}, {"t", {kBatch, 3}}}).with_gradients();
  for (std::int64_t rows : {3, 5})
    expect_equal_to_one_micro_batch(fn, {test::random_tensor({rows, 4}, 28), test::random_tensor({rows, 3}, 29)}, {2, 3});
}

// Outputs with a batch dim come back whole, in row order, next to the row-weighted loss.
TEST(MicroBatches, UnevenSplitsConcatenateBatchedOutputsInOrder) {
  Generator gen(30);
  Linear lin(3, 2, gen);
  auto fn = [&](const std::vector<Var>& in) {
    const Var y = lin(in[0]);
    return std::vector<Var>{mean(y * y), y};
  };
  const TracedFunction traced = trace(fn, {{"x", {kBatch, 3}}}).with_gradients();
  const Tensor x = test::random_tensor({5, 3}, 31);
  expect_equal_to_one_micro_batch(traced, {x}, {2, 3, 4});
  Engine engine;
  const StepResult r = run_with(engine, traced, 3, {x});
  NoGradGuard no_grad;
  EXPECT_LE(test::scaled_max_error(r.outputs[1], lin(Var(x)).tensor()), 1e-6);
}

TEST(MicroBatches, InputsThatCannotBeSplitAreRefusedWithTheReason) {
  Generator gen(32);
  Linear lin(3, 2, gen);
  Engine engine;
  auto expect_refused = [&](const TracedFunction& fn, const std::vector<Tensor>& inputs, const std::string& words) {
    try {
      run_with(engine, fn, 2, inputs);
      FAIL() << "expected a refusal mentioning: " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::shape_mismatch);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  // Inputs with different batch sizes (each symbol bound on its own).
  auto two = [&](const std::vector<Var>& in) { return std::vector<Var>{mean(lin(in[0])) + mean(in[1])}; };
  const TracedFunction rows = trace(two, {{"x", {SymDim::symbol("a"), 3}}, {"z", {SymDim::symbol("b")}}}).with_gradients();
  expect_refused(rows, {test::random_tensor({4, 3}, 33), test::random_tensor({8}, 34)},
                 "input 'z' of shape [8] has 8 rows but input 'x' has 4");
  // A batch dim fixed by the signature.
  auto one = [&](const std::vector<Var>& in) { return std::vector<Var>{mean(lin(in[0]))}; };
  expect_refused(trace(one, {{"x", {4, 3}}}).with_gradients(), {test::random_tensor({4, 3}, 35)}, "input 'x' has a fixed dim 0");
  // A fixed batch of one row needs no split.
  const StepResult single = run_with(engine, trace(one, {{"x", {1, 3}}}).with_gradients(), 2, {test::random_tensor({1, 3}, 36)});
  EXPECT_EQ(single.gradients.size(), 2u);
}
