// Data parallelism in the runtime over in-process ranks: two ranks at per-rank batch B train
// exactly like one process at batch 2B (loss, clipped gradients and parameters after several
// steps), on the overlapped bucket path and on the naive path, with several buckets; every rank
// reports the same loss and the same post-reduce bucket norms; uneven micro-batches keep this;
// gradients go from their stages through the buckets to the optimizer, never through the program;
// a planned (level 3) step makes no allocator calls on either rank.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::actors::ClipMode;
using troupe::actors::Engine;
using troupe::actors::ProgramOptions;
using troupe::actors::StepResult;

namespace {
const SymDim kBatch = SymDim::symbol("batch");

// One rank's model, the same on every rank: a GPT block and its MSE loss on (x, y) [batch, 6, 16].
struct RankModel {
  Generator gen{5};
  GPTBlock model{16, 2, gen};
  // The traced training step at JIT level `level` (1: as traced).
  TracedFunction step(int level) {
    auto loss = [this](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(model(in[0]), in[1])}; };
    const std::vector<InputSpec> sig{{"x", {kBatch, 6, 16}}, {"y", {kBatch, 6, 16}}};
    return level < 3 ? trace(loss, sig).with_gradients() : trace(loss, sig).optimized(3).with_gradients().optimized(3);
  }
};

struct RankRun {
  std::vector<double> losses, norms;
  std::vector<std::vector<double>> bucket_norms;
  std::map<std::string, Tensor> params;
};

// Trains a GPT block for `steps` SGD steps with clipping; `world` ranks each take their slice of
// the global batch (world 1 = the single-process reference); `streams`: ProgramOptions::streams.
std::vector<RankRun> train(int world, ClipMode mode, int steps, const Tensor& x, const Tensor& y, bool overlap = true,
                           int streams = 0) {
  auto transports = world > 1 ? transport::make_inprocess_world(world) : std::vector<std::unique_ptr<transport::Transport>>{};
  std::vector<RankRun> runs(static_cast<std::size_t>(world));
  Engine engine(actors::EngineOptions{2});
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      RankModel m;
      kernels::SgdParams hp;
      hp.lr = 0.2;
      hp.momentum = 0.9;
      ProgramOptions po;
      po.optimizers = {std::make_shared<SGD>(m.model.parameters(), hp)};
      po.clip_grad_norm = 0.05;
      po.clip_mode = mode;
      po.micro_batches = 2;
      po.streams = streams;
      if (world > 1) {
        po.data_parallel.communicator = std::make_shared<transport::Communicator>(
            std::move(transports[static_cast<std::size_t>(r)]), "allreduce", 0, 256);
        po.data_parallel.fusion_mb = 0.004;  // ~1000 floats: several buckets
        po.data_parallel.first_bucket_mb = 0.001;
        po.data_parallel.overlap = overlap;
      }
      auto program = engine.compile(m.step(1), po);
      if (world > 1) {
        EXPECT_GT(program->actor_counts().at("bucket"), 2);
        if (!overlap) {
          EXPECT_EQ(program->actor_counts().at("bucket"), program->actor_counts().at("gradient"));
        }
      }
      const std::int64_t rows = x.size(0) / world;
      const Tensor xr = x.slice(0, r * rows, (r + 1) * rows).contiguous(), yr = y.slice(0, r * rows, (r + 1) * rows).contiguous();
      RankRun& out = runs[static_cast<std::size_t>(r)];
      for (int s = 0; s < steps; ++s) {
        const StepResult res = program->run({xr, yr});
        out.losses.push_back(res.outputs[0].item());
        out.norms.push_back(res.grad_norm);
        out.bucket_norms.push_back(res.bucket_squared_norms);
      }
      for (const auto& [name, t] : m.model.state_dict()) out.params[name] = t.clone();
    });
  for (auto& t : threads) t.join();
  return runs;
}
}  // namespace

TEST(DataParallel, TwoRanksEqualOneProcessAtTheGlobalBatch) {
  const Tensor x = test::random_tensor({8, 6, 16}, 31), y = test::random_tensor({8, 6, 16}, 32);
  const RankRun single = train(1, ClipMode::parallel, 5, x, y)[0];
  // Clip mode and overlap are separate settings: every combination trains like one process.
  for (const auto& [mode, overlap] : {std::pair{ClipMode::parallel, true}, std::pair{ClipMode::naive, false},
                                      std::pair{ClipMode::naive, true}, std::pair{ClipMode::parallel, false}}) {
    SCOPED_TRACE(std::string(mode == ClipMode::parallel ? "parallel clip" : "naive clip") +
                 (overlap ? ", overlapped buckets" : ", one AllReduce per gradient after the step"));
    const auto ranks = train(2, mode, 5, x, y, overlap);
    for (int s = 0; s < 5; ++s) {
      EXPECT_EQ(ranks[0].losses[s], ranks[1].losses[s]) << "step " << s;  // the same loss on every rank
      EXPECT_NEAR(ranks[0].losses[s], single.losses[s], 1e-5 * std::abs(single.losses[s])) << "step " << s;
      EXPECT_NEAR(ranks[0].norms[s], single.norms[s], 1e-5 * single.norms[s]) << "step " << s;
      EXPECT_EQ(ranks[0].bucket_norms[s], ranks[1].bucket_norms[s]);
    }
    for (const auto& [name, p] : single.params) {
      EXPECT_LE(test::scaled_max_error(ranks[0].params.at(name), p), 1e-5) << name;
      EXPECT_EQ(test::scaled_max_error(ranks[0].params.at(name), ranks[1].params.at(name)), 0.0) << name;
    }
  }
}

// Stream-ordered ranks (ProgramOptions::streams): the gradient stages act once their gradients are
// written, so the buckets, their AllReduce and the clip see what kernels run in the actors give.
TEST(DataParallel, StreamOrderedRanksGiveTheBitsOfKernelsRunInTheActors) {
  const Tensor x = test::random_tensor({8, 6, 16}, 31), y = test::random_tensor({8, 6, 16}, 32);
  const auto inline_ranks = train(2, ClipMode::parallel, 3, x, y);
  const auto streamed = train(2, ClipMode::parallel, 3, x, y, true, 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(streamed[r].losses, inline_ranks[r].losses) << "rank " << r;
    EXPECT_EQ(streamed[r].norms, inline_ranks[r].norms) << "rank " << r;
    for (const auto& [name, p] : inline_ranks[r].params)
      EXPECT_EQ(test::scaled_max_error(streamed[r].params.at(name), p), 0.0) << "rank " << r << ": " << name;
  }
}

// Each rank's 3 rows run as micro-batches of 2 + 1 (the single process splits its 6 as 3 + 3): the
// row weighting keeps every rank's gradient the mean over its rows, so the ranks still train like one process.
TEST(DataParallel, UnevenMicroBatchesOnEveryRankEqualOneProcess) {
  const Tensor x = test::random_tensor({6, 6, 16}, 33), y = test::random_tensor({6, 6, 16}, 34);
  const RankRun single = train(1, ClipMode::parallel, 3, x, y)[0];
  const auto ranks = train(2, ClipMode::parallel, 3, x, y);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(ranks[0].losses[s], ranks[1].losses[s]) << "step " << s;
    EXPECT_NEAR(ranks[0].losses[s], single.losses[s], 1e-5 * std::abs(single.losses[s])) << "step " << s;
    EXPECT_NEAR(ranks[0].norms[s], single.norms[s], 1e-5 * single.norms[s]) << "step " << s;
  }
  for (const auto& [name, p] : single.params) EXPECT_LE(test::scaled_max_error(ranks[0].params.at(name), p), 1e-5) << name;
}

// The gradient path in a trace of one step on two ranks: each gradient stage writes its gradient
// into its bucket's buffer and tells the bucket (the message carries no bytes), each full bucket is
// reduced once, its norm goes to the clip actor and its gradients, as views, to the optimizer.
// The program receives control messages only.
TEST(DataParallel, GradientsGoFromStageToBucketToOptimizerWithoutTheProgram) {
  const Tensor x = test::random_tensor({4, 6, 16}, 35), y = test::random_tensor({4, 6, 16}, 36);
  actors::Tracer& tracer = actors::Tracer::instance();
  tracer.clear();
  tracer.enable(true);
  train(2, ClipMode::parallel, 1, x, y);
  tracer.enable(false);
  std::map<std::string, int> sends;  // "kind->receiver kind", e.g. "filled->bucket"
  for (const actors::TraceEvent& e : tracer.events()) {
    if (e.type != actors::TraceEvent::Type::send) continue;
    const std::string to = tracer.actor_name(e.peer), kind = e.kind;
    ++sends[kind + "->" + to.substr(0, to.find(' '))];
    if (kind == "filled") {
      EXPECT_EQ(e.bytes, 0u) << "a gradient stage writes into the bucket; the message carries none";
    }
  }
  tracer.clear();
  const int gradients = sends["filled->bucket"], buckets = sends["bucket->program"];
  EXPECT_GT(gradients, 0);
  EXPECT_EQ(sends["gradient->optimizer"], gradients) << "each reduced gradient goes to its optimizer";
  EXPECT_GT(buckets, 4);  // more than 2 buckets per rank
  EXPECT_EQ(sends["reduce->collectives"], buckets) << "each bucket asks once for its AllReduce";
  EXPECT_EQ(sends["allreduce->communicator"], buckets);
  EXPECT_EQ(sends["norm->clip"], buckets) << "parallel clip: one partial norm per reduced bucket";
  EXPECT_EQ(sends["clip->optimizer"], 2);
  for (const auto& [flow, n] : sends) {
    if (flow.size() <= 9 || flow.substr(flow.size() - 9) != "->program") continue;
    EXPECT_TRUE(flow == "run->program" || flow == "done->program" || flow == "output->program" || flow == "bucket->program" ||
                flow == "reduced->program" || flow == "clipped->program" || flow == "applied->program")
        << flow << " reached the program";
  }
}

// At level 3 a data-parallel step runs its acts in the step's arena, and the gradient buckets'
// buffers are the program's, kept from step to step: beyond that the step only asks the allocator
// for a few 0-d values (each bucket's norm, the loss' mean over the ranks), never for a buffer.
// Both ranks run in this process, so the count covers both.
TEST(DataParallel, APlannedStepOnTwoRanksAllocatesNoBuffers) {
  const int world = 2, warm_up = 3;
  auto transports = transport::make_inprocess_world(world);
  Engine engine(actors::EngineOptions{2});
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  // Every rank waits here until all have arrived `round` times.
  auto meet = [&](int round) {
    std::unique_lock<std::mutex> lock(mutex);
    ++arrived;
    changed.notify_all();
    changed.wait(lock, [&] { return arrived >= round * world; });
  };
  std::size_t held = 0;
  AllocatorStats during;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      RankModel m;
      ProgramOptions po;
      kernels::AdamWParams hp;
      po.optimizers = {std::make_shared<AdamW>(m.model.parameters(), hp)};
      po.clip_grad_norm = 0.05;
      po.micro_batches = 2;
      po.return_gradients = false;
      po.data_parallel.communicator = std::make_shared<transport::Communicator>(
          std::move(transports[static_cast<std::size_t>(r)]), "allreduce", 0, 256);
      po.data_parallel.fusion_mb = 0.004;
      auto program = engine.compile(m.step(3), po);
      const std::vector<Tensor> in{test::random_tensor({4, 6, 16}, 40 + r), test::random_tensor({4, 6, 16}, 50 + r)};
      for (int s = 0; s < warm_up; ++s) program->run(in);
      meet(1);
      if (r == 0) {
        cpu_allocator().reset_stats();
        held = cpu_allocator().stats().current_bytes;
      }
      meet(2);
      program->run(in);
      meet(3);
      if (r == 0) during = cpu_allocator().stats();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(during.requests, 0u) << "a planned data-parallel step asked the allocator";
  EXPECT_EQ(during.peak_bytes, held);
}

// Returned gradients are views of the bucket buffers: a caller keeping a step's gradients keeps
// them unchanged through the next step, which gets buffers of its own.
TEST(DataParallel, GradientsACallerKeepsAreNotOverwrittenByTheNextStep) {
  const int world = 2;
  auto transports = transport::make_inprocess_world(world);
  Engine engine(actors::EngineOptions{2});
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      RankModel m;
      ProgramOptions po;
      kernels::SgdParams hp;
      hp.lr = 0.5;
      po.optimizers = {std::make_shared<SGD>(m.model.parameters(), hp)};
      po.data_parallel.communicator = std::make_shared<transport::Communicator>(
          std::move(transports[static_cast<std::size_t>(r)]), "allreduce", 0, 256);
      po.data_parallel.fusion_mb = 0.004;
      auto program = engine.compile(m.step(1), po);
      const std::vector<Tensor> in{test::random_tensor({4, 6, 16}, 60 + r), test::random_tensor({4, 6, 16}, 70 + r)};
      const StepResult first = program->run(in);
      ASSERT_FALSE(first.gradients.empty());
      std::map<std::string, Tensor> copies;
      for (const auto& [name, g] : first.gradients) copies[name] = g.clone();
      const StepResult second = program->run(in);
      bool moved = false;
      for (const auto& [name, g] : first.gradients) {
        EXPECT_TRUE(test::same_bits(g.contiguous(), copies.at(name).contiguous())) << name << " changed after the next step";
        moved = moved || !test::same_bits(second.gradients.at(name).contiguous(), g.contiguous());
      }
      EXPECT_TRUE(moved) << "the parameters moved, so the second step's gradients differ";
    });
  for (auto& t : threads) t.join();
}
