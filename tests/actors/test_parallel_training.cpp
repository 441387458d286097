// ParallelTraining (troupe/actors/parallel_training.hpp), the library's parallel training: dp x tp
// with ZeRO-1 on four virtual devices trains like one process; a checkpoint's whole state moves
// from one layout to another and the run goes on as if uninterrupted; settings it cannot run are
// refused on every device alike, naming the setting, before any device waits for another.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "actors/parallel_runs.hpp"
#include "expect_error.hpp"
#include "troupe/kernels/elementwise.hpp"

using namespace troupe;
using namespace troupe::test;

TEST(ParallelTraining, Dp2Tp2WithZeroOnFourVirtualDevicesTrainsLikeOneProcess) {
  const Training single = train(settings(1, 1, 0), 1, 0, kSteps);
  EXPECT_LT(single.losses.back(), single.losses.front());
  for (const auto& [dp, tp, zero] : {std::tuple{2, 2, 1}, std::tuple{2, 2, 0}, std::tuple{4, 1, 1}, std::tuple{1, 4, 0}}) {
    SCOPED_TRACE("dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + ", zero " + std::to_string(zero));
    const Training hybrid = train(settings(dp, tp, zero), dp * tp, 0, kSteps);
    expect_close(hybrid.losses, single.losses, "loss");
    expect_close(hybrid.end, single.end);
  }
}

// Saved whole under one layout, resumed under another: dp 2 x tp 2 with ZeRO-1 after two steps,
// then one process for the rest, and the other way round; both go on as the uninterrupted run.
TEST(ParallelTraining, ACheckpointOfOneLayoutResumesUnderAnother) {
  const Training single = train(settings(1, 1, 0), 1, 0, kSteps);
  const std::vector<double> rest(single.losses.begin() + 2, single.losses.end());
  const Training hybrid_half = train(settings(2, 2, 1), 4, 0, 2);
  expect_close(train(settings(1, 1, 0), 1, 2, kSteps, hybrid_half.end).losses, rest, "one process after dp2 x tp2");
  const Training single_half = train(settings(1, 1, 0), 1, 0, 2);
  const Training hybrid_rest = train(settings(2, 2, 1), 4, 2, kSteps, single_half.end);
  expect_close(hybrid_rest.losses, rest, "dp2 x tp2 after one process");
  expect_close(hybrid_rest.end, single.end);
}

// Warm-up then cosine decay: every update's rate as the schedule says, the same training under
// dp 2 x tp 2 with ZeRO-1 (whose slices' optimizer takes the rates too), and a resumed run
// continuing the curve where the checkpoint left it.
TEST(ParallelTraining, ALearningRateScheduleSetsEveryUpdatesRateUnderAnyLayout) {
  const double peak = test::tiny_gpt_adamw().lr;
  actors::ParallelConfig config = settings(1, 1, 0);
  config.lr_schedule = {graph::LrDecay::cosine, 2, kSteps, peak / 10};
  const Training single = train(config, 1, 0, kSteps);
  const std::vector<double> want{peak / 2, peak, peak / 10 + (peak - peak / 10) * 0.5, peak / 10};
  ASSERT_EQ(single.lrs.size(), want.size());
  for (std::size_t s = 0; s < want.size(); ++s) EXPECT_NEAR(single.lrs[s], want[s], 1e-15) << "update " << s + 1;
  const Training constant = train(settings(1, 1, 0), 1, 0, kSteps);
  EXPECT_EQ(constant.lrs, std::vector<double>(kSteps, peak));
  double moved = 0;  // the schedule changed the training
  for (const auto& [name, t] : single.end.weights) moved = std::max(moved, test::scaled_max_error(constant.end.weights.at(name), t));
  EXPECT_GT(moved, 1e-2);

  actors::ParallelConfig hybrid = settings(2, 2, 1);
  hybrid.lr_schedule = config.lr_schedule;
  const Training parallel = train(hybrid, 4, 0, kSteps);
  EXPECT_EQ(parallel.lrs, single.lrs);
  expect_close(parallel.losses, single.losses, "loss");
  expect_close(parallel.end, single.end);

  const Training half = train(config, 1, 0, 2);
  const Training rest = train(hybrid, 4, 2, kSteps, half.end);
  EXPECT_EQ(rest.lrs, std::vector<double>(single.lrs.begin() + 2, single.lrs.end()));
  expect_close(rest.losses, std::vector<double>(single.losses.begin() + 2, single.losses.end()), "resumed loss");
  expect_close(rest.end, single.end);
}

// Two accumulated batches of two rows make the update one batch of four makes, on the actor
// runtime, eagerly, and with two replicas under ZeRO-1.
TEST(ParallelTraining, AccumulatedBatchesMakeTheUpdateOfOneBatch) {
  actors::ParallelConfig whole = settings(1, 1, 0);
  whole.micro_batches = 1;
  const Training one = train(whole, 1, 0, kSteps);
  actors::ParallelConfig accumulated = whole;
  accumulated.accumulation = 2;
  for (int jit : {1, 0}) {
    SCOPED_TRACE("JIT level " + std::to_string(jit));
    accumulated.jit_level = jit;
    const Training acc = train(accumulated, 1, 0, kSteps);
    expect_close(acc.losses, one.losses, "loss");
    expect_close(acc.end, one.end);
  }
  accumulated.jit_level = 1;
  accumulated.dp = 2;
  accumulated.zero = 1;
  const Training dp = train(accumulated, 2, 0, kSteps);
  expect_close(dp.losses, one.losses, "dp 2 loss");
  expect_close(dp.end, one.end);
}

// gradients_mean off: the replicas' gradients are summed, so plain SGD moves every weight twice
// as far with two replicas as with their mean.
TEST(ParallelTraining, GradientsSumOverTheReplicasWhenNotAveraged) {
  g_sgd = true;
  actors::ParallelConfig mean = settings(2, 1, 0);
  mean.clip = 0;
  const Training averaged = train(mean, 2, 0, 1);
  actors::ParallelConfig sum = mean;
  sum.gradients_mean = false;
  const Training summed = train(sum, 2, 0, 1);
  g_sgd = false;
  Generator gen(7);
  test::TinyGpt model(gen);
  for (const auto& [name, w0] : model.state_dict()) {
    const Tensor step_mean = kernels::sub(averaged.end.weights.at(name), w0);
    const Tensor twice = kernels::add(step_mean, step_mean);
    EXPECT_LE(test::scaled_max_error(kernels::sub(summed.end.weights.at(name), w0), twice), 1e-4) << name;
  }
  EXPECT_NEAR(summed.losses[0], averaged.losses[0], 1e-6);  // the loss is the replicas' mean either way
}

TEST(ParallelTraining, SettingsItCannotRunAreRefusedOnEveryDevice) {
  expect_refused(settings(1, 1, 1), 1, {"--zero 1 splits the optimizer state", "--dp 2 or more"});
  expect_refused(settings(2, 1, 0), 4, {"--dp 2", "rank", "of a 4-rank job", "troupe-launch -n 2"});
  expect_refused(settings(1, 2, 0), 2, {"--tp 2", "no placement policy"}, false);
  expect_refused(settings(1, 3, 0), 3, {"4 attention heads do not split among tp=3"});
  actors::ParallelConfig eager = settings(1, 2, 0);
  eager.jit_level = 0;
  expect_refused(eager, 2, {"--tp 2", "JIT_LEVEL=0 runs eagerly"});
  actors::ParallelConfig textbook = settings(2, 1, 1);
  textbook.overlap = false;
  expect_refused(textbook, 2, {"--zero 1 runs on the actor runtime's overlapped gradient path"});
  expect_refused(settings(3, 1, 0), 3, {"global batch of 4", "3 data-parallel replicas"});
  actors::ParallelConfig uneven = settings(1, 1, 0);
  uneven.accumulation = 3;
  expect_refused(uneven, 1, {"accumulation over 3 batches", "4 rows"});
}

// PowerSGD's state travels in the whole optimizer state: stopped after step 5 (three compressed
// steps after a warm-up of two) and resumed, dp 2 goes on as the uninterrupted run; so does dp 4,
// since the replicas' reduced gradients depend only on the mean of their errors. Without the
// state the run departs from it.
TEST(ParallelTraining, PowerSgdsStateResumesUnderTheSameAndAnotherReplicaCount) {
  actors::ParallelConfig config = settings(2, 1, 0);
  config.grad_compression = actors::GradCompression::parse("powersgd:1");
  config.grad_compression.warmup_steps = 2;
  const Training whole = train(config, 2, 0, 8);
  const std::vector<double> rest(whole.losses.begin() + 5, whole.losses.end());
  const Training half = train(config, 2, 0, 5);
  EXPECT_EQ(half.end.optimizer.at("grad_compression.rounds").to_vector<std::int64_t>(), std::vector<std::int64_t>{5});
  std::size_t errors = 0, starts = 0;
  for (const auto& [key, t] : half.end.optimizer) {
    errors += key.find(".powersgd_error") != std::string::npos;
    starts += key.rfind("grad_compression.", 0) == 0 && key.find(".q") != std::string::npos;
  }
  EXPECT_GT(errors, 0u);
  EXPECT_EQ(starts, errors);
  const Training resumed = train(config, 2, 5, 8, half.end);
  for (std::size_t s = 0; s < rest.size(); ++s) EXPECT_NEAR(resumed.losses[s], rest[s], 1e-6 * rest[s]) << "step " << s + 6;
  actors::ParallelConfig four = config;
  four.dp = 4;
  expect_close(train(four, 4, 5, 8, half.end).losses, rest, "dp 4 after dp 2");
  State forgotten = half.end;
  std::erase_if(forgotten.optimizer, [](const auto& kv) { return kv.first.find("powersgd") != std::string::npos ||
                                                                 kv.first.rfind("grad_compression.", 0) == 0; });
  const Training lost = train(config, 2, 5, 8, forgotten);
  double most = 0;
  for (std::size_t s = 0; s < rest.size(); ++s) most = std::max(most, std::abs(lost.losses[s] - rest[s]) / rest[s]);
  EXPECT_GT(most, 1e-4) << "the state made no difference: the test would not notice it lost";
}

// Auto measures five steps after the first, then says once what it chose for every bucket, and
// a checkpoint keeps the choice: the resumed run takes it instead of measuring again.
TEST(ParallelTraining, AutoCompressionChoosesOnceAndTheCheckpointKeepsTheChoice) {
  actors::ParallelConfig config = settings(2, 1, 0);
  config.grad_compression = actors::GradCompression::parse("auto");
  config.grad_compression.warmup_steps = 2;
  const Training first = train(config, 2, 0, 8);
  for (std::size_t s = 0; s < first.choices.size(); ++s) EXPECT_EQ(first.choices[s].empty(), s != 6) << "step " << s + 1;
  const std::string& said = first.choices[6];
  EXPECT_NE(said.find("auto (5 steps measured, the ranks' mean): link "), std::string::npos) << said;
  EXPECT_NE(said.find("bucket 0 ("), std::string::npos) << said;
  EXPECT_NE(said.find("past backward plus CPU predicted"), std::string::npos) << said;
  const Training resumed = train(config, 2, 8, 9, first.end);
  ASSERT_EQ(resumed.choices.size(), 1u);
  EXPECT_EQ(resumed.choices[0].rfind("auto: as the checkpoint chose: bucket 0 ", 0), 0u) << resumed.choices[0];
}
