// Tensor and hybrid parallelism in the runtime (graph/spmd.hpp, actors/tensor_parallel.hpp): a
// GPT trained for 5 AdamW steps with gradient clipping on tp=2 and tp=4 devices (Megatron's
// placement, the collectives inside the step), and on dp=2 x tp=2, gives the losses, the clipping
// norms and the updated weights of one process at the same global batch, on the parallel and the
// naive clip path, with several micro-batches too, and tracks it with mixed precision; each
// device holds only its shards of the split weights and of the vocabulary tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <map>
#include <thread>

#include "kernels/reference.hpp"
#include "tiny_gpt.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/models/gpt_placement.hpp"
#include "troupe/plan/propagation.hpp"
#include "troupe/actors/tensor_parallel.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/graph/spmd.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::plan::propagate_sharding;

namespace {

constexpr int kSteps = 5;
constexpr std::int64_t kBatch = 4;
constexpr double kClip = 0.5;  // below the norms of the first steps, so clipping scales them

Tensor tokens(std::uint64_t seed) { return test::tiny_gpt_tokens(kBatch, seed); }

// Megatron's plan of `step` on a mesh of tp devices, at `batch` rows per step.
GraphPlacement megatron_tp_plan(const TracedFunction& step, int tp, std::int64_t batch) {
  const Mesh mesh{{{"tp", tp}}};
  const plan::PlacementRequest request = models::megatron_gpt_placement(step, mesh, 4);
  return propagate_sharding(step.graph(), mesh, request.given, request.required, {{"batch", batch}});
}

// The trained parameters of a step's (local) function.
std::vector<Var> trained(const TracedFunction& f) {
  std::vector<Var> out;
  for (std::size_t k : f.gradient_parameters()) out.push_back(f.parameters()[k]);
  return out;
}

struct Training {
  std::vector<double> losses, norms;
  std::map<std::string, Tensor> params;            // whole, assembled from the devices' shards
  std::map<std::string, Shape> shard_shapes;       // what device 0 held
};

// One process at the global batch: the unsharded step.
Training train_single(const Tensor& ids, const Tensor& targets, const AmpOptions& amp = {}) {
  Generator gen(7);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step(amp);
  actors::Engine engine(actors::EngineOptions{1});
  actors::ProgramOptions po;
  po.optimizers = {std::make_shared<AdamW>(trained(step), test::tiny_gpt_adamw())};
  po.clip_grad_norm = kClip;
  auto program = engine.compile(step, po);
  Training run;
  for (int s = 0; s < kSteps; ++s) {
    const actors::StepResult r = program->run({ids, targets});
    run.losses.push_back(r.outputs[0].item());
    run.norms.push_back(r.grad_norm);
  }
  for (const auto& [name, t] : model.state_dict()) run.params[name] = t.clone();
  return run;
}

// dp x tp devices as threads, each with its own engine: device (i, j) takes batch rows i of dp and
// shards j of tp of the Megatron plan on the tp axis; dp reduces the gradients between the rows.
// The weights come back whole through TensorParallelStep::gather, which also takes the optimizer
// state apart and back together (shard(gather(state)) is each device's own state).
Training train_hybrid(int dp, int tp, const Tensor& ids, const Tensor& targets, actors::ClipMode clip_mode,
                      int micro_batches = 1, const AmpOptions& amp = {}) {
  const std::int64_t rows = kBatch / dp;
  std::vector<std::vector<std::unique_ptr<transport::Transport>>> tp_worlds, norm_worlds, dp_worlds;
  for (int i = 0; i < dp; ++i) tp_worlds.push_back(transport::make_inprocess_world(tp));
  for (int i = 0; i < dp; ++i) norm_worlds.push_back(transport::make_inprocess_world(tp));
  for (int j = 0; j < tp; ++j) dp_worlds.push_back(transport::make_inprocess_world(dp));
  std::vector<std::vector<double>> losses(static_cast<std::size_t>(dp * tp)), norms(losses.size());
  std::vector<std::map<std::string, Tensor>> whole(losses.size()), shards(losses.size());
  std::vector<std::thread> devices;
  for (int d = 0; d < dp * tp; ++d)
    devices.emplace_back([&, d] {
      const int i = d / tp, j = d % tp;
      const auto at = static_cast<std::size_t>(d);
      Generator gen(7);
      test::TinyGpt model(gen);
      const TracedFunction step = model.step(amp);
      const actors::TensorParallelStep device(step, megatron_tp_plan(step, tp, rows),
                                              std::make_shared<transport::Communicator>(std::move(tp_worlds[i][j]), "tp"));
      actors::Engine engine(actors::EngineOptions{static_cast<std::size_t>(micro_batches > 1 ? 3 : 1)});
      actors::ProgramOptions po;
      auto optimizer = std::make_shared<AdamW>(device.trained(), test::tiny_gpt_adamw());
      po.optimizers = {optimizer};
      po.clip_grad_norm = kClip;
      po.clip_mode = clip_mode;
      po.micro_batches = micro_batches;
      po.tensor_parallel.norms = std::make_shared<transport::Communicator>(std::move(norm_worlds[i][j]), "tp-norms");
      po.tensor_parallel.replicated = device.replicated();
      if (dp > 1) po.data_parallel.communicator = std::make_shared<transport::Communicator>(std::move(dp_worlds[j][i]), "allreduce");
      auto program = engine.compile(device.local(), po);
      const Tensor my_ids = ids.slice(0, i * rows, (i + 1) * rows).contiguous();
      const Tensor my_targets = targets.slice(0, i * rows, (i + 1) * rows).contiguous();
      for (int s = 0; s < kSteps; ++s) {
        const actors::StepResult r = program->run({my_ids, my_targets});
        losses[at].push_back(r.outputs[0].item());
        norms[at].push_back(r.grad_norm);
      }
      shards[at] = device.parameter_shards();
      whole[at] = device.gather(shards[at]);
      const std::map<std::string, Tensor> state = optimizer->state_dict();
      const std::map<std::string, Tensor> state_again = device.shard(device.gather(state));
      for (const auto& [key, t] : state) EXPECT_EQ(test::scaled_max_error(state_again.at(key), t), 0.0) << key;
    });
  for (std::thread& t : devices) t.join();

  Training run;
  for (std::size_t d = 0; d < losses.size(); ++d) {
    EXPECT_EQ(losses[d], losses[0]) << "device " << d;
    EXPECT_EQ(norms[d], norms[0]) << "device " << d;
    for (const auto& [name, t] : whole[0]) EXPECT_EQ(test::scaled_max_error(whole[d].at(name), t), 0.0) << name << ", device " << d;
  }
  run.losses = losses[0];
  run.norms = norms[0];
  run.params = whole[0];
  for (const auto& [name, t] : shards[0]) run.shard_shapes[name] = t.shape();
  return run;
}

// Losses and clip norms within `tolerance` (relative), weights within `weights` (scaled).
void expect_same_training(const Training& got, const Training& single, double tolerance = 1e-5, double weights = 1e-5) {
  for (int s = 0; s < kSteps; ++s)
    EXPECT_NEAR(got.losses[static_cast<std::size_t>(s)], single.losses[static_cast<std::size_t>(s)],
                tolerance * std::abs(single.losses[static_cast<std::size_t>(s)])) << "step " << s;
  for (int s = 0; s < kSteps; ++s)
    EXPECT_NEAR(got.norms[static_cast<std::size_t>(s)], single.norms[static_cast<std::size_t>(s)],
                tolerance * single.norms[static_cast<std::size_t>(s)]) << "step " << s;
  for (const auto& [name, p] : single.params) {
    EXPECT_LE(test::scaled_max_error(got.params.at(name), p), weights) << name;
  }
}

}  // namespace

TEST(TensorParallel, TwoAndFourShardsTrainLikeOneProcess) {
  const Tensor ids = tokens(1), targets = tokens(2);
  const Training single = train_single(ids, targets);
  EXPECT_LT(single.losses.back(), single.losses.front());  // it learns
  EXPECT_GT(single.norms.front(), kClip);                  // and clipping takes effect
  for (const auto& [tp, mode] : {std::pair{2, actors::ClipMode::parallel}, std::pair{4, actors::ClipMode::parallel},
                                 std::pair{2, actors::ClipMode::naive}}) {
    SCOPED_TRACE("tp=" + std::to_string(tp) + (mode == actors::ClipMode::naive ? ", naive clip" : ", parallel clip"));
    const Training run = train_hybrid(1, tp, ids, targets, mode);
    expect_same_training(run, single);
    // Each device holds 1/tp of the split weights (qkv rows, fc rows, the projections' columns, the
    // tables' vocabulary rows), all of the rest.
    EXPECT_EQ(run.shard_shapes.at("blocks.0.attn.qkv.weight"), (Shape{48 / tp, 16}));
    EXPECT_EQ(run.shard_shapes.at("blocks.1.attn.proj.weight"), (Shape{16, 16 / tp}));
    EXPECT_EQ(run.shard_shapes.at("blocks.0.mlp.fc.weight"), (Shape{64 / tp, 16}));
    EXPECT_EQ(run.shard_shapes.at("blocks.0.mlp.proj.weight"), (Shape{16, 64 / tp}));
    EXPECT_EQ(run.shard_shapes.at("wte.weight"), (Shape{32 / tp, 16}));
    EXPECT_EQ(run.shard_shapes.at("head.weight"), (Shape{32 / tp, 16}));
    EXPECT_EQ(run.shard_shapes.at("ln_f.weight"), (Shape{16}));
  }
}

TEST(TensorParallel, DataAndTensorParallelTogetherTrainLikeOneProcess) {
  const Tensor ids = tokens(3), targets = tokens(4);
  const Training single = train_single(ids, targets);
  for (const actors::ClipMode mode : {actors::ClipMode::parallel, actors::ClipMode::naive}) {
    SCOPED_TRACE(mode == actors::ClipMode::naive ? "naive clip" : "parallel clip");
    expect_same_training(train_hybrid(2, 2, ids, targets, mode), single);
  }
}

// Several micro-batches per step: each device's chains of collectives, one per micro-batch, run in
// one order on every device (the micro-batches interleaved in waves of the actors' two registers),
// so 2 micro-batches, and 3 of uneven rows (2 + 1 + 1; two waves), train like one process.
TEST(TensorParallel, SeveralMicroBatchesMeetInOneOrder) {
  const Tensor ids = tokens(8), targets = tokens(9);
  const Training single = train_single(ids, targets);
  for (const auto& [dp, tp, micro_batches] : {std::tuple{1, 2, 2}, std::tuple{1, 2, 3}, std::tuple{1, 4, 4}, std::tuple{2, 2, 2}}) {
    SCOPED_TRACE("dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + ", " + std::to_string(micro_batches) +
                 " micro-batches");
    expect_same_training(train_hybrid(dp, tp, ids, targets, actors::ClipMode::parallel, micro_batches), single);
  }
}

// Mixed precision: the casts follow their inputs' placements (Megatron's placement sees through
// them), and the collectives sum bf16 activations in f32, rounded once. The shards' sums differ
// from one process's in bf16's last bits, so tp=2 tracks one process at O1, O2 and O3: losses and
// clip norms within 2e-3 (measured: 7e-5 to 4e-4), the weights, which AdamW moves by up to its
// learning rate whatever the gradient's size, within 0.1 of their scale (measured: 0.02 to 0.05).
TEST(TensorParallel, MixedPrecisionTracksOneProcess) {
  const Tensor ids = tokens(10), targets = tokens(11);
  for (const AmpLevel level : {AmpLevel::O1, AmpLevel::O2, AmpLevel::O3}) {
    SCOPED_TRACE(to_string(level));
    const AmpOptions amp{level, DType::bf16};
    expect_same_training(train_hybrid(1, 2, ids, targets, actors::ClipMode::parallel, 1, amp), train_single(ids, targets, amp),
                         2e-3, 0.1);
  }
}

// The device's graph has the plan's collectives and no others, in one chain: on tp=2, 10
// all-reduces of an activation (Megatron's g and f, 4 per block; the embedding's lookup and the
// head's input gradient), and the vocab-parallel cross-entropy's, forward and backward: an
// all-gather of each row's maximum and an all-reduce of its sums. The logits are never gathered.
TEST(TensorParallel, EachDeviceRunsThePlansCollectivesInOneChain) {
  Generator gen(7);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  const TracedFunction device = shard_step(step, megatron_tp_plan(step, 2, 2), MeshDevice{{1}, {42}});
  const Graph& local = device.graph();
  std::vector<const Node*> collectives;
  std::map<std::string, int> count;
  for (const Node& n : local.nodes()) {
    EXPECT_NE(n.op, "reduce_scatter");
    EXPECT_NE(n.op, "cross_entropy");  // run as its vocab-parallel parts
    if (n.op == "all_gather") {
      EXPECT_EQ(local.value(n.outputs[0]).info.shape.back(), SymDim(2)) << "a maximum per row and device";
    }
    if (n.op == "cross_entropy_parts") {
      EXPECT_EQ(local.value(n.inputs[0]).info.shape.back(), SymDim(16)) << "the device's half of the logits";
    }
    if (n.op == "all_reduce" || n.op == "all_gather") collectives.push_back(&n);
    ++count[n.op];
  }
  EXPECT_EQ(count["all_reduce"], 12);
  EXPECT_EQ(count["all_gather"], 2);
  EXPECT_EQ(count["cross_entropy_parts"], 2);
  ASSERT_EQ(collectives.size(), 14u);
  EXPECT_EQ(collectives[0]->inputs.size(), 1u);
  for (std::size_t c = 1; c < collectives.size(); ++c) {
    ASSERT_EQ(collectives[c]->inputs.size(), 2u);
    EXPECT_EQ(collectives[c]->inputs[1], collectives[c - 1]->outputs[0]);
    EXPECT_EQ(collectives[c]->attrs.get_int("group"), 42);
  }
}

// A tensor-parallel device that stops after one step makes its peer's next step fail within the
// transport's timeout, with an error naming the op, the group and the silent rank: no hang.
TEST(TensorParallel, ADeviceThatStopsFailsItsPeerNamingIt) {
  std::vector<std::unique_ptr<transport::Transport>> world = transport::make_inprocess_world(2);
  for (auto& t : world) t->timeout = std::chrono::milliseconds(300);
  const Tensor ids = tokens(5), targets = tokens(6);
  std::string error;
  std::vector<std::thread> devices;
  for (int d = 0; d < 2; ++d)
    devices.emplace_back([&, d] {
      Generator gen(7);
      test::TinyGpt model(gen);
      const TracedFunction step = model.step();
      const actors::TensorParallelStep device(
          step, megatron_tp_plan(step, 2, kBatch),
          std::make_shared<transport::Communicator>(std::move(world[static_cast<std::size_t>(d)]), "tp"));
      actors::Engine engine(actors::EngineOptions{1});
      auto program = engine.compile(device.local());
      program->run({ids, targets});
      if (d == 1) return;  // device 1 is gone
      try {
        program->run({ids, targets});
      } catch (const Error& e) {
        error = e.what();
      }
    });
  for (std::thread& t : devices) t.join();
  EXPECT_NE(error.find("all_reduce on tp (rank 0 of 2)"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1 sent nothing within 300 ms"), std::string::npos) << error;
}

// No handler ever blocks a scheduler thread: the four devices of dp=2 x tp=2 with ZeRO-1, two
// micro-batches and the parallel clip all run on ONE engine with ONE scheduler thread. A device
// waiting on that thread for a collective (tensor-parallel, the clip's norm sums, ZeRO-1's
// all-gather) would keep its peers from ever joining it, and the step would fail on the
// transport's timeout; instead every collective completes by a message, and the devices train like
// one process. The last step is traced: each collective is a slice on its group's track, with a
// flow from the op that started it and one back to that op when it is over.
TEST(TensorParallel, NoHandlerBlocksFourDevicesShareOneSchedulerThread) {
  constexpr int dp = 2, tp = 2;
  const std::int64_t rows = kBatch / dp;
  const Tensor ids = tokens(12), targets = tokens(13);
  const Training single = train_single(ids, targets);
  std::vector<std::vector<std::unique_ptr<transport::Transport>>> tp_worlds, norm_worlds, dp_worlds, zero_worlds;
  for (int i = 0; i < dp; ++i) tp_worlds.push_back(transport::make_inprocess_world(tp));
  for (int i = 0; i < dp; ++i) norm_worlds.push_back(transport::make_inprocess_world(tp));
  for (int j = 0; j < tp; ++j) dp_worlds.push_back(transport::make_inprocess_world(dp));
  for (int j = 0; j < tp; ++j) zero_worlds.push_back(transport::make_inprocess_world(dp));
  for (auto* worlds : {&tp_worlds, &norm_worlds, &dp_worlds, &zero_worlds})
    for (auto& world : *worlds)
      for (auto& t : world) t->timeout = std::chrono::milliseconds(2000);
  actors::Engine engine(actors::EngineOptions{1});
  struct Device {
    std::unique_ptr<test::TinyGpt> model;
    std::unique_ptr<actors::TensorParallelStep> step;
    std::unique_ptr<actors::Program> program;
    Tensor ids, targets;
  };
  std::vector<Device> devices(dp * tp);
  std::vector<std::thread> building;  // (compiling agrees with the peers, on the caller's thread)
  for (int d = 0; d < dp * tp; ++d) building.emplace_back([&, d] {
    const int i = d / tp, j = d % tp;
    Device& device = devices[static_cast<std::size_t>(d)];
    Generator gen(7);
    device.model = std::make_unique<test::TinyGpt>(gen);
    const TracedFunction step = device.model->step();
    device.step = std::make_unique<actors::TensorParallelStep>(
        step, megatron_tp_plan(step, tp, rows), std::make_shared<transport::Communicator>(std::move(tp_worlds[i][j]), "tp"));
    actors::ProgramOptions po;
    po.optimizers = {std::make_shared<AdamW>(device.step->trained(), test::tiny_gpt_adamw())};
    po.clip_grad_norm = kClip;
    po.micro_batches = 2;
    po.tensor_parallel.norms = std::make_shared<transport::Communicator>(std::move(norm_worlds[i][j]), "tp-norms");
    po.tensor_parallel.replicated = device.step->replicated();
    po.data_parallel.communicator = std::make_shared<transport::Communicator>(std::move(dp_worlds[j][i]), "allreduce");
    po.data_parallel.zero = true;
    po.data_parallel.zero_group = std::make_shared<transport::Communicator>(std::move(zero_worlds[j][i]), "zero");
    device.program = engine.compile(device.step->local(), po);
    device.ids = ids.slice(0, i * rows, (i + 1) * rows).contiguous();
    device.targets = targets.slice(0, i * rows, (i + 1) * rows).contiguous();
  });
  for (std::thread& t : building) t.join();
  Training run;
  actors::Tracer& tracer = actors::Tracer::instance();
  for (int s = 0; s < kSteps; ++s) {
    if (s == kSteps - 1) {
      tracer.clear();
      tracer.enable(true);
    }
    std::vector<std::future<actors::StepResult>> results;
    for (Device& device : devices) results.push_back(device.program->run_async({device.ids, device.targets}));
    std::vector<actors::StepResult> done;
    for (auto& r : results) done.push_back(r.get());
    for (const actors::StepResult& r : done) {
      EXPECT_EQ(r.outputs[0].item(), done[0].outputs[0].item());
      EXPECT_EQ(r.grad_norm, done[0].grad_norm);
    }
    run.losses.push_back(done[0].outputs[0].item());
    run.norms.push_back(done[0].grad_norm);
  }
  tracer.enable(false);
  std::vector<std::map<std::string, Tensor>> whole(devices.size());
  std::vector<std::thread> gathering;  // (every device of a tp group gathers together)
  for (std::size_t d = 0; d < devices.size(); ++d) gathering.emplace_back([&, d] {
    devices[d].program->settle();
    whole[d] = devices[d].step->gather(devices[d].step->parameter_shards());
  });
  for (std::thread& t : gathering) t.join();
  run.params = whole[0];
  expect_same_training(run, single);

  const std::vector<actors::TraceEvent> events = tracer.events();
  std::map<std::uint64_t, const actors::TraceEvent*> sends;
  for (const actors::TraceEvent& e : events)
    if (e.type == actors::TraceEvent::Type::send) sends[e.flow] = &e;
  int slices = 0;
  for (const actors::TraceEvent& e : events) {
    if (e.type != actors::TraceEvent::Type::handle || tracer.actor_name(e.actor).rfind("communicator tp", 0) != 0) continue;
    ++slices;
    const auto started = sends.find(e.flow);
    ASSERT_NE(started, sends.end()) << e.kind << ": no flow into the collective's slice";
    const std::string op = tracer.actor_name(started->second->actor);
    EXPECT_EQ(op.rfind(e.kind, 0), 0u) << "the op '" << op << "' started a " << e.kind;
    const bool back = std::any_of(events.begin(), events.end(), [&](const actors::TraceEvent& a) {
      return a.type == actors::TraceEvent::Type::send && a.actor == e.actor && a.peer == started->second->actor &&
             std::string(a.kind) == "acted" && a.micro_batch == e.micro_batch && a.ts_ns >= e.ts_ns;
    });
    EXPECT_TRUE(back) << "no flow from the " << e.kind << " back to '" << op << "'";
  }
  // 14 collectives a micro-batch on each of the 4 devices (EachDeviceRunsThePlansCollectivesInOneChain).
  EXPECT_EQ(slices, 14 * 2 * 4);
}
