// Pipeline parallelism (ParallelConfig::pp): the tiny GPT's layers split among stages on virtual
// devices train like one process at the same global batch, under every schedule, with data
// parallelism beside, with fewer micro-batches than stages, with uneven splits and stages that
// hold no parameters; a checkpoint saved under one layout resumes under another; settings it
// cannot run are refused on every device alike.
#include "actor_graph.hpp"
#include "actors/parallel_runs.hpp"
#include "troupe/plan/mesh_search.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

constexpr int kLongRun = 20;
const actors::PipelineSchedule kSchedules[] = {actors::PipelineSchedule::gpipe, actors::PipelineSchedule::one_f_one_b,
                                               actors::PipelineSchedule::zb_h1};

actors::ParallelConfig pipeline(int pp, actors::PipelineSchedule schedule, int micro_batches, int dp = 1, int zero = 0) {
  actors::ParallelConfig c = settings(dp, 1, zero);
  c.pp = pp;
  c.schedule = schedule;
  c.micro_batches = micro_batches;
  return c;
}

// One process, the reference: the same global batch in `micro_batches` micro-batches.
Training one_process(int steps, int micro_batches = 4) {
  actors::ParallelConfig one = settings(1, 1, 0);
  one.micro_batches = micro_batches;
  return train(one, 1, 0, steps);
}

// Losses and weights within 1e-5 (relative; the weights' error scaled by their largest), the
// optimizer state within 1e-3 (AdamW's second moments of near-zero gradients differ in rounding);
// or within `loss` and `weights` where rounding differs.
void expect_same_run(const Training& got, const Training& want, double loss = 1e-5, double weights = 1e-5) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], loss * std::abs(want.losses[s])) << "step " << s;
  for (const auto& [name, t] : want.end.weights) EXPECT_LE(scaled_max_error(got.end.weights.at(name), t), weights) << name;
  ASSERT_EQ(got.end.optimizer.size(), want.end.optimizer.size());
  if (weights <= 1e-5) {
    for (const auto& [key, t] : want.end.optimizer) EXPECT_LE(scaled_max_error(got.end.optimizer.at(key), t), 1e-3) << key;
  }
}

}  // namespace

TEST(PipelineParallel, TwoAndFourStagesTrainLikeOneProcessUnderEverySchedule) {
  const Training single = one_process(kLongRun);
  for (const actors::PipelineSchedule schedule : kSchedules)
    for (const int pp : {2, 4}) {
      SCOPED_TRACE("pp " + std::to_string(pp) + ", " + actors::schedule_name(schedule));
      expect_same_run(train(pipeline(pp, schedule, 4), pp, 0, kLongRun), single);
    }
}

// dp 2 x pp 2 on four devices: each stage's two replicas reduce their gradients (with ZeRO-1
// too, each updating half the optimizer state), the clipping norm sums over both axes.
TEST(PipelineParallel, DataParallelStagesTrainLikeOneProcess) {
  const Training single = one_process(kSteps);
  for (const int zero : {0, 1}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    expect_same_run(train(pipeline(2, actors::PipelineSchedule::one_f_one_b, 2, 2, zero), 4, 0, kSteps), single);
  }
}

// Fewer micro-batches than stages run (the pipeline is mostly idle) and never hang; so do
// uneven splits, a first stage of the embedding alone and stages of no layers at all, which hold
// no parameters (they only pass the activations on) or only the head.
TEST(PipelineParallel, FewMicroBatchesUnevenSplitsAndEmptyStagesTrainLikeOneProcess) {
  for (const int m : {1, 2}) {
    SCOPED_TRACE(std::to_string(m) + " micro-batches on 4 stages");
    expect_same_run(train(pipeline(4, actors::PipelineSchedule::one_f_one_b, m), 4, 0, kSteps), one_process(kSteps, m));
  }
  const Training single = one_process(kSteps);
  for (const std::vector<int>& split : {std::vector<int>{2, 0}, {0, 2}, {0, 1, 0, 1}, {0, 0, 2, 0}}) {
    std::string name;
    for (int n : split) name += std::to_string(n) + " ";
    SCOPED_TRACE("layers " + name);
    actors::ParallelConfig c = pipeline(static_cast<int>(split.size()), actors::PipelineSchedule::one_f_one_b, 4);
    c.pp_layers = split;
    expect_same_run(train(c, c.pp, 0, kSteps), single);
  }
}

// Saved whole after two steps under pp 2 and resumed under one process, under dp 2 and under
// pp 4 (and from one process under pp 2): each goes on as the uninterrupted run.
TEST(PipelineParallel, ACheckpointOfOneLayoutResumesUnderAnother) {
  const Training single = one_process(kSteps);
  const Training piped = train(pipeline(2, actors::PipelineSchedule::gpipe, 4), 2, 0, 2);
  const std::vector<double> rest_losses(single.losses.begin() + 2, single.losses.end());
  struct Layout {
    actors::ParallelConfig config;
    int devices;
  };
  actors::ParallelConfig one = settings(1, 1, 0);
  one.micro_batches = 4;
  for (const Layout& l : {Layout{one, 1}, Layout{settings(2, 1, 1), 2}, Layout{pipeline(4, actors::PipelineSchedule::one_f_one_b, 4), 4}}) {
    SCOPED_TRACE("resumed on " + std::to_string(l.devices) + " devices, pp " + std::to_string(l.config.pp));
    Training rest = train(l.config, l.devices, 2, kSteps, piped.end);
    Training want = single;
    want.losses = rest_losses;
    expect_same_run(rest, want);
  }
  const Training half = train(one, 1, 0, 2);
  Training want = single;
  want.losses = rest_losses;
  expect_same_run(train(pipeline(2, actors::PipelineSchedule::one_f_one_b, 4), 2, 2, kSteps, half.end), want);
}

TEST(PipelineParallel, SettingsItCannotRunAreRefusedOnEveryDevice) {
  const actors::PipelineSchedule f = actors::PipelineSchedule::one_f_one_b;
  expect_refused(pipeline(2, f, 2), 2, {"--pp 2", "no split into stages", "TrainingProblem::stages"}, false);
  expect_refused(pipeline(2, f, 2), 4, {"--dp 1 x --pp 2", "4-rank job", "troupe-launch -n 2"});
  actors::ParallelConfig counts = pipeline(2, f, 2);
  counts.pp_layers = {1, 1, 0};
  expect_refused(counts, 2, {"--pp-layers 1,1,0", "3 stages", "--pp is 2"});
  counts.pp_layers = {1, 2};
  expect_refused(counts, 2, {"--pp-layers 1,2", "adds up to 3", "the model has 2"});
  actors::ParallelConfig eager = pipeline(2, f, 2);
  eager.jit_level = 0;
  expect_refused(eager, 2, {"--pp 2", "JIT_LEVEL=0 runs eagerly"});
  EXPECT_EQ(actors::parse_pipeline_schedule("gpipe"), actors::PipelineSchedule::gpipe);
  EXPECT_EQ(actors::parse_pipeline_schedule(actors::schedule_name(f)), f);
  EXPECT_EQ(actors::parse_pipeline_schedule("zb-h1"), actors::PipelineSchedule::zb_h1);
  expect_error_mentions([] { actors::parse_pipeline_schedule("zb"); }, {"'zb'", "gpipe, 1f1b, zb-h1"});
}

// The stages' steps go through the passes of every JIT level (level 3: fusions and planned
// memory) and mixed precision, and track one process at the same settings: within 1e-5 but at
// level 3 with O3, where the fusions that one process makes across a stage boundary (a block's
// residual add with the next block's LayerNorm) round in bf16 once where the stages round twice,
// within the tolerance of tensor parallelism's mixed precision (losses 2e-3, weights 0.1 of their
// scale, which AdamW moves by up to its learning rate whatever the gradient's size).
TEST(PipelineParallel, EveryJitLevelAndMixedPrecisionTrackOneProcess) {
  for (const int level : {2, 3})
    for (const graph::AmpLevel amp : {graph::AmpLevel::O0, graph::AmpLevel::O1, graph::AmpLevel::O2, graph::AmpLevel::O3}) {
      SCOPED_TRACE("JIT level " + std::to_string(level) + ", " + graph::to_string(amp));
      actors::ParallelConfig one = settings(1, 1, 0);
      one.micro_batches = 4;
      one.jit_level = level;
      one.amp = {amp, DType::bf16};
      actors::ParallelConfig piped = pipeline(2, actors::PipelineSchedule::one_f_one_b, 4);
      piped.jit_level = level;
      piped.amp = one.amp;
      const bool rounds_apart = level == 3 && amp == graph::AmpLevel::O3;
      const Training single = train(one, 1, 0, kSteps);
      expect_same_run(train(piped, 2, 0, kSteps), single, rounds_apart ? 2e-3 : 1e-5, rounds_apart ? 0.1 : 1e-5);
      if (level < 3 || amp != graph::AmpLevel::O0) continue;
      piped.schedule = actors::PipelineSchedule::zb_h1;  // its triggers under the memory plan's edges
      expect_same_run(train(piped, 2, 0, kSteps), single);
    }
}

// ZB-H1's order on the last of two stages: the weight gradients' actors wait for the act sending
// the received input's gradient (which needs none of them), so most parameters' gradient stages
// come after it; what the send needs (a LayerNorm's backward makes its weights' gradients with
// the input's) stays before it.
TEST(PipelineParallel, ZeroBubbleDefersTheWeightGradientsAfterTheInputGradientsSend) {
  Generator gen(7);
  TinyGpt model(gen);
  const graph::SymDim b = graph::SymDim::symbol("batch");
  const graph::TracedFunction step =
      plan::trace_stage_steps(model.stages(), {1, 1}, {{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}})[1];
  actors::ActorGraph plan = actors::lower_to_actors(step, {false, false});
  const actors::ActorGraph before = plan;
  actors::defer_weight_gradients(plan, step.graph());
  int sender = -1;
  for (std::size_t a = 0; a < plan.actors.size(); ++a)
    for (const actors::Member& m : plan.actors[a].members)
      if (step.graph().node(m.node).op == "pipe_send" && step.graph().node(m.node).backward) sender = static_cast<int>(a);
  ASSERT_GE(sender, 0);
  // after[a]: actor a waits for the sender, directly or through others.
  std::vector<bool> after(plan.actors.size(), false);
  for (std::size_t a = 0; a < plan.actors.size(); ++a)  // producers come first (checked below)
    for (int p : plan.actors[a].producers) after[a] = after[a] || p == sender || after[static_cast<std::size_t>(p)];
  EXPECT_FALSE(after[static_cast<std::size_t>(sender)]);
  int deferred = 0, gradients = 0;
  for (std::size_t k = 0; k < plan.sinks.size(); ++k) {
    if (plan.sink_param[k] < 0) continue;
    ++gradients;
    deferred += after[static_cast<std::size_t>(plan.sinks[k])];
  }
  EXPECT_GT(deferred, gradients / 2) << deferred << " of " << gradients;
  EXPECT_LT(deferred, gradients);
  // The same actors, numbered again with every producer before its consumers.
  ASSERT_EQ(plan.actors.size(), before.actors.size());
  for (std::size_t a = 0; a < plan.actors.size(); ++a)
    for (int p : plan.actors[a].producers) EXPECT_LT(p, static_cast<int>(a)) << plan.actors[a].name;
}

// tp 2 x pp 2 on four devices: each stage's step placed by Megatron's policy and split between
// its two shards (the sends and receives move the replicated block outputs and input gradients),
// the clipping norm summed over the tp group, then over the stages; and a checkpoint of it
// resumes in one process.
TEST(PipelineParallel, TensorParallelStagesTrainLikeOneProcess) {
  const Training single = one_process(kSteps);
  actors::ParallelConfig c = pipeline(2, actors::PipelineSchedule::one_f_one_b, 4);
  c.tp = 2;
  const Training hybrid = train(c, 4, 0, kSteps);
  expect_same_run(hybrid, single);
  const Training half = train(c, 4, 0, 2);
  Training want = single;
  want.losses.erase(want.losses.begin(), want.losses.begin() + 2);
  actors::ParallelConfig one = settings(1, 1, 0);
  one.micro_batches = 4;
  expect_same_run(train(one, 1, 2, kSteps, half.end), want);
}

// A searched mesh (ParallelConfig::search) may be a pipeline: on two devices with a memory budget
// only the pipeline fits (the planner's own figure for it), the job runs pp 2 and trains like one
// process.
TEST(PipelineParallel, TheSearchChoosesAPipelineWhenOnlyItFits) {
  Generator gen(7);
  TinyGpt model(gen);
  const graph::SymDim b = graph::SymDim::symbol("batch");
  plan::MeshSearch q{model.step(), 2, models::megatron_gpt_policy(4), {{"batch", kBatch}}, plan::CostModel{}, 0, 8};
  q.stages = model.stages();
  q.signature = {{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}};
  q.micro_batches = 4;
  const std::vector<plan::MeshCandidate> candidates = plan::search_meshes(q);
  const auto piped = std::find_if(candidates.begin(), candidates.end(), [](const plan::MeshCandidate& c) { return c.pp == 2; });
  ASSERT_NE(piped, candidates.end());
  actors::ParallelConfig c = settings(1, 1, 0);
  c.search = true;
  c.memory_budget = piped->memory.total();  // memory does not depend on the speeds the job measures
  c.micro_batches = 4;
  const Training searched = train(c, 2, 0, kSteps);
  EXPECT_EQ(searched.pp, 2);
  EXPECT_EQ(searched.dp * searched.tp, 1);
  expect_same_run(searched, one_process(kSteps));
}

// Dynamic loss scaling: the last stage's backward starts from the scale, the others' gradients
// arrive scaled, every stage divides it out of the norm summed over the pipeline and updates its
// scaler alike (a stage of no parameters from that sum); pp 2 and pp 4 (layers 1,1,0,0) equal one
// process with the same scaling.
TEST(PipelineParallel, LossScalingTrainsLikeOneProcess) {
  actors::ParallelConfig one = settings(1, 1, 0);
  one.micro_batches = 4;
  one.loss_scaling = true;
  const Training single = train(one, 1, 0, kSteps);
  for (const int pp : {2, 4}) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    actors::ParallelConfig c = pipeline(pp, actors::PipelineSchedule::one_f_one_b, 4);
    c.loss_scaling = true;
    expect_same_run(train(c, pp, 0, kSteps), single);
  }
}
