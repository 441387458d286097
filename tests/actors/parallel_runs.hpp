#pragma once
// Runs of the tiny GPT under a ParallelConfig on virtual devices, for the parallel-training
// tests: the losses, learning rates and the whole state a run leaves, and comparisons of runs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "actors/tiny_gpt.hpp"
#include "expect_error.hpp"
#include "kernels/reference.hpp"
#include "troupe/actors/parallel_training.hpp"
#include "troupe/models/gpt_placement.hpp"

namespace troupe::test {

constexpr std::int64_t kBatch = 4;
constexpr int kSteps = 4;

// Where a run starts and what it leaves: the model's weights and the optimizer's whole state.
struct State {
  std::map<std::string, Tensor> weights, optimizer;
};

// The losses of steps [from, to) of a run of `config` on `devices` virtual devices, starting from
// `start` (the model's initial weights when empty), and the whole state it leaves.
struct Training {
  std::vector<double> losses, lrs;
  State end;
  std::vector<std::string> choices;  // gradient compression auto's report, per step
  int dp = 1, tp = 1, pp = 1;        // the mesh it ran (a searched one's choice)
};

// Plain SGD (lr 0.1) instead of the tiny model's AdamW, whose update does not see a gradient's scale.
inline bool g_sgd = false;

inline Training train(const actors::ParallelConfig& config, int devices, int from, int to, const State& start = {}) {
  const std::vector<std::shared_ptr<actors::Job>> jobs = actors::Job::virtual_devices(devices);
  std::vector<Training> runs(static_cast<std::size_t>(devices));
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d)
    threads.emplace_back([&, d] {
      Generator gen(7);
      test::TinyGpt model(gen);
      if (!start.weights.empty()) model.load_state_dict(start.weights);
      const graph::SymDim b = graph::SymDim::symbol("batch");
      actors::TrainingProblem problem;
      problem.model = &model;
      problem.loss = [&model](const std::vector<graph::Var>& in) { return std::vector<graph::Var>{model.loss(in[0], in[1])}; };
      problem.signature = {{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}};
      problem.global_batch = kBatch;
      problem.optimizer = [](const std::vector<graph::Var>& parameters) -> std::shared_ptr<graph::Optimizer> {
        if (!g_sgd) return std::make_shared<graph::AdamW>(parameters, test::tiny_gpt_adamw());
        kernels::SgdParams plain;
        plain.lr = 0.1;
        return std::make_shared<graph::SGD>(parameters, plain);
      };
      problem.placement = models::megatron_gpt_policy(4);
      problem.stages = model.stages();
      actors::ParallelTraining training(problem, config, jobs[static_cast<std::size_t>(d)]);
      if (!start.optimizer.empty()) training.load_optimizer_state(start.optimizer);
      training.set_steps(from);
      Training& run = runs[static_cast<std::size_t>(d)];
      run.dp = training.dp();
      run.tp = training.tp();
      run.pp = training.pp();
      for (int s = from; s < to; ++s) {
        const actors::StepReport r = training.step({test::tiny_gpt_tokens(kBatch, 100 + s), test::tiny_gpt_tokens(kBatch, 200 + s)});
        run.losses.push_back(r.loss);
        run.lrs.push_back(r.lr);
        run.choices.push_back(r.compression_choice);
      }
      training.gather_parameters();
      run.end.optimizer = training.optimizer_state();
      for (const auto& [name, t] : model.state_dict()) run.end.weights[name] = t.clone();
    });
  for (std::thread& t : threads) t.join();
  for (int d = 1; d < devices; ++d) EXPECT_EQ(runs[static_cast<std::size_t>(d)].losses, runs[0].losses) << "device " << d;
  return runs[0];
}

inline actors::ParallelConfig settings(int dp, int tp, int zero) {
  actors::ParallelConfig c;
  c.dp = dp;
  c.tp = tp;
  c.zero = zero;
  c.clip = 0.5;
  c.micro_batches = 2;
  c.bucket_mb = 0.01;  // several buckets, no link to measure
  return c;
}

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t s = 0; s < want.size(); ++s) EXPECT_NEAR(got[s], want[s], 2e-5 * std::abs(want[s])) << what << ", step " << s;
}

inline void expect_close(const State& got, const State& want) {
  for (const auto& [name, t] : want.weights) EXPECT_LE(test::scaled_max_error(got.weights.at(name), t), 1e-4) << name;
  ASSERT_EQ(got.optimizer.size(), want.optimizer.size());
  for (const auto& [key, t] : want.optimizer) EXPECT_LE(test::scaled_max_error(got.optimizer.at(key), t), 1e-3) << key;
}

// Constructing a ParallelTraining of `config` on `devices` virtual devices fails on every device
// with an error naming each of `words`; without `policies` the model brings neither its placement
// nor its split into stages.
inline void expect_refused(const actors::ParallelConfig& config, int devices, const std::vector<std::string>& words,
                           bool policies = true) {
  const std::vector<std::shared_ptr<actors::Job>> jobs = actors::Job::virtual_devices(devices);
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d)
    threads.emplace_back([&, d] {
      Generator gen(7);
      test::TinyGpt model(gen);
      actors::TrainingProblem problem;
      problem.model = &model;
      problem.loss = [&model](const std::vector<graph::Var>& in) { return std::vector<graph::Var>{model.loss(in[0], in[1])}; };
      const graph::SymDim b = graph::SymDim::symbol("batch");
      problem.signature = {{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}};
      problem.global_batch = kBatch;
      problem.optimizer = [](const std::vector<graph::Var>& p) { return std::make_shared<graph::AdamW>(p, test::tiny_gpt_adamw()); };
      if (policies) {
        problem.placement = models::megatron_gpt_policy(4);
        problem.stages = model.stages();
      }
      test::expect_error_mentions([&] { actors::ParallelTraining(problem, config, jobs[static_cast<std::size_t>(d)]); }, words);
    });
  for (std::thread& t : threads) t.join();
}

}  // namespace troupe::test
