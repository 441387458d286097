// ZeRO-1 in the runtime (DataParallel::zero): each bucket reduce-scattered, each rank updating and
// keeping the optimizer state of its 1/n of every bucket, the parameters all-gathered. On 2 and 3
// in-process ranks (3 pads the buckets), a GPT trained 5 AdamW steps with clipping equals plain
// data parallelism (losses, norms, weights); the ranks' kept states partition the whole state, so
// each holds 1/n of it; gathered it equals plain data parallelism's optimizer state, and loading
// it back gives each rank its own slices again; options that cannot work are refused.
#include <gtest/gtest.h>

#include <thread>

#include "expect_error.hpp"
#include "kernels/reference.hpp"
#include "tiny_gpt.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {

constexpr int kSteps = 5;

struct RankRun {
  std::vector<double> losses, norms;
  std::map<std::string, Tensor> params, state;  // state: the optimizer's (plain) or the gathered one (ZeRO-1)
  std::map<std::string, Tensor> kept;           // ZeRO-1: what the rank keeps
};

// `world` ranks train the tiny GPT, each on its rows of the batch, with ZeRO-1 or without.
std::vector<RankRun> train(int world, bool zero, const Tensor& ids, const Tensor& targets) {
  auto grads = transport::make_inprocess_world(world), zeros = transport::make_inprocess_world(world);
  std::vector<RankRun> runs(static_cast<std::size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      Generator gen(7);
      test::TinyGpt model(gen);
      auto optimizer = std::make_shared<AdamW>(model.parameters(), test::tiny_gpt_adamw());
      actors::ProgramOptions po;
      po.optimizers = {optimizer};
      po.clip_grad_norm = 0.5;
      po.data_parallel.communicator = std::make_shared<transport::Communicator>(std::move(grads[static_cast<std::size_t>(r)]), "allreduce");
      po.data_parallel.fusion_mb = 0.01;  // several buckets
      po.data_parallel.first_bucket_mb = 0.002;
      po.data_parallel.zero = zero;
      if (zero) po.data_parallel.zero_group = std::make_shared<transport::Communicator>(std::move(zeros[static_cast<std::size_t>(r)]), "zero");
      actors::Engine engine(actors::EngineOptions{1});
      auto program = engine.compile(model.step(), po);
      const std::int64_t rows = ids.size(0) / world;
      const Tensor my_ids = ids.slice(0, r * rows, (r + 1) * rows).contiguous(), my_targets = targets.slice(0, r * rows, (r + 1) * rows).contiguous();
      RankRun& out = runs[static_cast<std::size_t>(r)];
      for (int s = 0; s < kSteps; ++s) {
        const actors::StepResult res = program->run({my_ids, my_targets});
        out.losses.push_back(res.outputs[0].item());
        out.norms.push_back(res.grad_norm);
      }
      program->settle();  // ZeRO-1: the last step's all-gather runs on after the step answered
      for (const auto& [name, t] : model.state_dict()) out.params[name] = t.clone();
      if (!zero) {
        EXPECT_EQ(program->zero_state(), nullptr);
        out.state = optimizer->state_dict();
        return;
      }
      actors::ZeroState& state = *program->zero_state();
      out.kept = state.kept();
      out.state = state.gather();
      EXPECT_EQ(optimizer->state_dict().size(), 1u) << "the user's optimizer kept no state (only its learning rate)";
      state.load(out.state);  // a checkpoint's whole state back: each rank takes its own slices again
      for (const auto& [key, t] : state.kept()) EXPECT_EQ(test::scaled_max_error(t, out.kept.at(key)), 0.0) << key;
    });
  for (std::thread& t : ranks) t.join();
  return runs;
}

std::int64_t slot_elements(const std::map<std::string, Tensor>& state) {
  std::int64_t n = 0;
  for (const auto& [key, t] : state)
    if (key.find(".exp_avg") != std::string::npos) n += t.numel();
  return n;
}

}  // namespace

TEST(Zero, EqualsPlainDataParallelAndKeepsOneNthOfTheState) {
  const Tensor ids = test::tiny_gpt_tokens(6, 1), targets = test::tiny_gpt_tokens(6, 2);
  for (int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    const std::vector<RankRun> plain = train(world, false, ids, targets), zero = train(world, true, ids, targets);
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(zero[0].losses[s], plain[0].losses[s], 1e-5 * std::abs(plain[0].losses[s])) << "step " << s;
      EXPECT_NEAR(zero[0].norms[s], plain[0].norms[s], 1e-5 * plain[0].norms[s]) << "step " << s;
    }
    EXPECT_GT(plain[0].norms[0], 0.5) << "clipping takes effect";
    for (const RankRun& rank : zero)
      for (const auto& [name, p] : plain[0].params) EXPECT_LE(test::scaled_max_error(rank.params.at(name), p), 1e-5) << name;
    for (const auto& [key, t] : plain[0].state) EXPECT_LE(test::scaled_max_error(zero[0].state.at(key), t), 1e-5) << key;
    // The ranks' slices partition every moment: each keeps 1/n of the state (up to a bucket's padding).
    const std::int64_t whole = slot_elements(plain[0].state);
    std::int64_t kept = 0;
    for (const RankRun& rank : zero) {
      kept += slot_elements(rank.kept);
      EXPECT_LE(slot_elements(rank.kept), whole / world + 2 * 16 * world) << "more than its share";
    }
    EXPECT_EQ(kept, whole);
  }
}

TEST(Zero, RefusesOptionsThatCannotWork) {
  Generator gen(7);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  auto world = transport::make_inprocess_world(1);
  auto comm = std::make_shared<transport::Communicator>(std::move(world[0]), "allreduce");
  actors::Engine engine(actors::EngineOptions{1});
  const auto compile = [&](const std::function<void(actors::ProgramOptions&)>& change) {
    actors::ProgramOptions po;
    po.optimizers = {std::make_shared<AdamW>(model.parameters(), kernels::AdamWParams{})};
    po.data_parallel.communicator = comm;
    po.data_parallel.zero = true;
    po.data_parallel.zero_group = comm;
    change(po);
    engine.compile(step, po);
  };
  test::expect_error_mentions([&] { compile([](actors::ProgramOptions& po) { po.data_parallel.zero_group = nullptr; }); },
                              {"ZeRO-1 needs data_parallel.zero_group"});
  test::expect_error_mentions([&] { compile([](actors::ProgramOptions& po) { po.optimizers.push_back(po.optimizers[0]); }); },
                              {"ZeRO-1 shards one optimizer's state; give exactly one (got 2)"});
  test::expect_error_mentions([&] {
    compile([](actors::ProgramOptions& po) {
      po.clip_grad_norm = 1;
      po.clip_mode = actors::ClipMode::naive;
    });
  }, {"ZeRO-1 clips on the parallel path"});
  test::expect_error_mentions([&] { compile([](actors::ProgramOptions& po) { po.data_parallel.communicator = nullptr; }); },
                              {"data_parallel.zero needs a communicator"});
}
