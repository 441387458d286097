// Planning a hybrid-parallel step (troupe/plan/placement.hpp, strategy.hpp): the job's mesh uses
// every device; Megatron's placement of a GPT training step needs four all-reduces per block on a
// tensor-parallel axis (and two at its vocab-parallel tables) and, on a data-parallel one, the loss' and the gradients' once and nothing
// inside the step; heads that do not split are refused; tensor parallelism divides the split
// weights' bytes per device; ZeRO-1 halves the optimizer state on dp=2 for the same bytes; a
// strategy file saved and loaded gives the identical plan, and one
// made for another mesh or model, or damaged, is refused clearly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "expect_error.hpp"
#include "actors/tiny_gpt.hpp"
#include "troupe/actors/planner.hpp"
#include "troupe/models/gpt_placement.hpp"
#include "troupe/plan/link.hpp"
#include "troupe/plan/mesh_search.hpp"
#include "troupe/plan/placement.hpp"
#include "troupe/plan/propagation.hpp"
#include "troupe/plan/strategy.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/plan/pipeline_cost.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::plan::propagate_sharding;

namespace {

// The search over the meshes of 4 devices for `step` (a GPT of 4 heads, Megatron's placement).
std::vector<plan::MeshCandidate> search_4(const TracedFunction& step, const SymBindings& batch, const plan::CostModel& cost,
                                          double budget) {
  return plan::search_meshes({step, 4, models::megatron_gpt_policy(4), batch, cost, budget, 8});
}

// Megatron's placement of `step` on dp x tp devices, and its plan at a global batch of `batch`.
struct MegatronPlan {
  Mesh mesh;
  plan::PlacementRequest request;
  GraphPlacement plan;
};
MegatronPlan megatron_plan(const TracedFunction& step, int dp, int tp, std::int64_t batch, bool zero1 = false) {
  MegatronPlan m;
  m.mesh = plan::job_mesh(dp, tp, dp * tp);
  m.request = models::megatron_gpt_placement(step, m.mesh, 4, zero1);
  m.plan = propagate_sharding(step.graph(), m.mesh, m.request.given, m.request.required, {{"batch", batch}});
  return m;
}

std::vector<Transition> communicating(const GraphPlacement& plan) {
  std::vector<Transition> out;
  for (const Transition& t : plan.transitions)
    if (t.collective != Collective::local) out.push_back(t);
  return out;
}

}  // namespace

TEST(Planning, TheJobMeshUsesEveryDevice) {
  EXPECT_EQ(plan::job_mesh(2, 2, 4).str(), "dp=2 x tp=2");
  try {
    plan::job_mesh(2, 3, 4);
    ADD_FAILURE() << "dp x tp != world was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dp 2 x --tp 3 = 6 devices, but the job has 4 processes"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plan::job_mesh(0, 4, 4), Error);
}

// Along tp, 4 all-reduces of an activation per block (Megatron's g and f) and 2 at the vocabulary
// (the embedding's lookup, the head's input gradient); the tables split by vocabulary rows. The
// same with mixed precision, whose casts of the weights and activations the placement sees through.
TEST(Planning, MegatronGptAllReducesFourActivationsPerBlockAndTwoAtTheVocabulary) {
  Generator gen(1);
  test::TinyGpt model(gen);
  const TracedFunction mixed = model.step({AmpLevel::O2, DType::bf16});
  const auto o2 = megatron_plan(mixed, 1, 2, 2);
  int mixed_axis = 0;
  for (const Transition& t : communicating(o2.plan)) {
    EXPECT_EQ(t.collective, Collective::all_reduce);
    mixed_axis += t.mesh_axis == 1;
  }
  EXPECT_EQ(mixed_axis, 4 * 2 + 2);
  const TracedFunction step = model.step();
  const auto [mesh, request, plan] = megatron_plan(step, 1, 2, 2);
  int tensor_axis = 0;
  for (const Transition& t : communicating(plan)) {
    if (t.mesh_axis != 1) continue;
    EXPECT_EQ(t.collective, Collective::all_reduce);
    EXPECT_DOUBLE_EQ(t.bytes, 2 * 8 * 16 * 4) << "2 (n-1)/n of an activation [2, 8, 16] f32";
    ++tensor_axis;
  }
  EXPECT_EQ(tensor_axis, 4 * 2 + 2);
  const auto named = [&](const std::string& name) {
    for (ValueId v : step.graph().parameters())
      if (step.graph().value(v).name == name) return v;
    return ValueId{-1};
  };
  EXPECT_EQ(placement_str(request.given.at(named("wte.weight"))), "(B, S(0))");
  EXPECT_EQ(placement_str(request.given.at(named("head.weight"))), "(B, S(0))");
  // Every gradient is placed like its parameter.
  const Graph& g = step.graph();
  for (std::size_t k = 0; k < step.gradient_parameters().size(); ++k)
    EXPECT_EQ(placement_str(request.required.at(g.outputs()[1 + k])),
              placement_str(request.given.at(g.parameters()[step.gradient_parameters()[k]])));
}

TEST(Planning, DataParallelAllReducesTheLossAndTheGradientsOnce) {
  Generator gen(2);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  const GraphPlacement plan = megatron_plan(step, 2, 1, 4).plan;
  double bytes = 0;
  for (const Transition& t : communicating(plan)) {
    EXPECT_EQ(t.consumer, -1) << "value " << t.value << ": the step itself stays local";
    EXPECT_EQ(t.collective, Collective::all_reduce);
    bytes += t.bytes;
  }
  double parameter_bytes = 0;
  for (const Var& p : step.parameters()) parameter_bytes += static_cast<double>(p.tensor().nbytes());
  EXPECT_DOUBLE_EQ(bytes, parameter_bytes + 4) << "every gradient and the loss all-reduced once";
}

TEST(Planning, HeadsThatDoNotSplitAreRefused) {
  Generator gen(3);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  try {
    models::megatron_gpt_placement(step, plan::job_mesh(1, 3, 3), 4);
    ADD_FAILURE() << "4 heads on tp=3 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 attention heads do not split among tp=3"), std::string::npos) << e.what();
  }
}

TEST(Planning, TensorParallelismDividesTheSplitWeightsPerDevice) {
  Generator gen(4);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  double all = 0, split = 0;  // parameter bytes, and those of the weights Megatron splits
  for (const auto& [name, t] : model.state_dict()) {
    all += static_cast<double>(t.nbytes());
    for (const char* s : {"qkv.weight", "qkv.bias", "attn.proj.weight", "fc.weight", "fc.bias", "mlp.proj.weight", "wte.weight",
                          "head.weight"})
      if (name.find(s) != std::string::npos) split += static_cast<double>(t.nbytes());
  }
  const auto memory = [&](int tp) {
    return plan::device_memory(step, megatron_plan(step, 1, tp, 2).plan,
                               {{"batch", 2}}, 8);
  };
  const plan::DeviceMemory one = memory(1), two = memory(2), four = memory(4);
  EXPECT_DOUBLE_EQ(one.parameters, all);
  EXPECT_DOUBLE_EQ(two.parameters, all - split / 2);
  EXPECT_DOUBLE_EQ(four.parameters, all - split * 3 / 4);
  EXPECT_DOUBLE_EQ(two.gradients, two.parameters);
  EXPECT_DOUBLE_EQ(two.optimizer_state, 2 * two.parameters);  // AdamW: two f32 moments per f32 parameter
  EXPECT_LT(two.activations, one.activations);                 // the heads' and the MLP's activations split
}

namespace {

// A fresh file name in the temporary folder.
std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("troupe_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST(Strategy, SavedThenLoadedGivesTheIdenticalPlan) {
  Generator gen(5);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  const SymBindings batch{{"batch", 4}};
  const auto [mesh, request, plan] = megatron_plan(step, 2, 2, 4);
  const std::string file = temp_file("strategy.json");
  plan::save_strategy(file, plan::make_strategy(step, mesh, request, plan));
  const plan::Strategy loaded = plan::load_strategy(file);
  // The qkv weight [48, 16], (B, S(0)x3) on dp=2 x tp=2: each device holds 8 rows of q, k and v.
  for (const plan::Strategy::Layout& l : loaded.parameters)
    if (l.name == "blocks.0.attn.qkv.weight") {
      EXPECT_EQ(placement_str(l.placement), "(B, S(0)x3)");
      EXPECT_EQ(l.shard_shape, (Shape{24, 16}));
    }
  const plan::PlacementRequest again = plan::strategy_request(loaded, step, mesh, file);
  const GraphPlacement replanned = propagate_sharding(step.graph(), mesh, again.given, again.required, batch);
  ASSERT_EQ(replanned.placements.size(), plan.placements.size());
  for (const auto& [v, p] : plan.placements) EXPECT_EQ(placement_str(replanned.placements.at(v)), placement_str(p)) << v;
  ASSERT_EQ(replanned.transitions.size(), plan.transitions.size());
  for (std::size_t t = 0; t < plan.transitions.size(); ++t) {
    EXPECT_EQ(replanned.transitions[t].value, plan.transitions[t].value);
    EXPECT_EQ(replanned.transitions[t].collective, plan.transitions[t].collective);
    EXPECT_DOUBLE_EQ(replanned.transitions[t].bytes, plan.transitions[t].bytes);
  }
  std::filesystem::remove(file);
}

TEST(Strategy, AFileForAnotherMeshOrModelOrDamagedIsRefused) {
  Generator gen(6);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  const MegatronPlan m = megatron_plan(step, 2, 2, 4);
  const Mesh& mesh = m.mesh;
  const std::string file = temp_file("strategy_mismatch.json");
  plan::save_strategy(file, plan::make_strategy(step, mesh, m.request, m.plan));
  const plan::Strategy s = plan::load_strategy(file);
  test::expect_error_mentions([&] { plan::strategy_request(s, step, plan::job_mesh(1, 4, 4), file); },
               {file, "made for the mesh dp=2 x tp=2, and this job's is dp=1 x tp=4"});
  test::TinyGpt wider(gen, 32);
  const TracedFunction other = wider.step();
  test::expect_error_mentions([&] { plan::strategy_request(s, other, mesh, file); },
               {file, "'blocks.0.mlp.fc.weight' [64, 16] in the file and 'blocks.0.mlp.fc.weight' [32, 16] in this model"});
  const auto write = [&](const std::string& text) {
    std::ofstream(file) << text;
    return file;
  };
  test::expect_error_mentions([&] { plan::load_strategy(write("{\"format\": \"troupe-strategy\", \"version\": 1,")); },
               {file, "not valid JSON"});
  test::expect_error_mentions([&] { plan::load_strategy(write("{\"format\": \"other\"}")); }, {file, "not a troupe strategy"});
  std::string good;
  plan::save_strategy(file, s);
  {
    std::ifstream saved(file);
    good.assign(std::istreambuf_iterator<char>(saved), {});
  }
  const std::size_t at = good.find("\"S(0)x3\"");
  ASSERT_NE(at, std::string::npos);
  test::expect_error_mentions([&] { plan::load_strategy(write(good.substr(0, at) + "\"S(0)y3\"" + good.substr(at + 8))); },
               {file, "placement 'S(0)y3' is none of B, P, S(<dim>) or S(<dim>)x<blocks>"});
  test::expect_error_mentions([&] { plan::load_strategy(temp_file("no_such_strategy.json")); }, {"cannot be read"});
  EXPECT_EQ(plan::parse_placement("S(2)x3"), Placement::split(2, 3));
  for (const char* bad : {"S()", "S(1", "S(1)x", "S(1)x0", "s(1)", "S(1) ", "BB", ""})
    EXPECT_THROW(plan::parse_placement(bad), Error) << bad;
  std::filesystem::remove(file);
}

// Each op declares its work (OpDef::cost): 2mnk for a product, 4 T^2 D per head for attention,
// 2 per output element and weight tap for a convolution, nothing for a view, and by default the
// elements an op touches; symbolic dims at the bindings' sizes.
TEST(CostModel, EachOpDeclaresItsWork) {
  const TracedFunction f = trace(
      [](const std::vector<Var>& in) {
        return std::vector<Var>{matmul(in[0], in[1], false, true), causal_attention(in[2], in[2], in[2], 0.5),
                                reshape(in[0], {8, 4}), gelu(in[0]), conv2d(in[3], in[4], 1, 1)};
      },
      {{"a", {4, 8}}, {"b", {6, 8}}, {"q", {2, 3, 5, 4}}, {"x", {SymDim::symbol("n"), 3, 6, 6}}, {"w", {5, 3, 3, 3}}});
  const Graph& g = f.graph();
  const auto cost = [&](const std::string& op) {
    for (const Node& n : g.nodes())
      if (n.op == op) return op_cost(g, n, {{"n", 2}});
    ADD_FAILURE() << "no " << op;
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(cost("matmul"), 2 * 4 * 6 * 8);
  EXPECT_DOUBLE_EQ(cost("causal_attention"), 4 * (2 * 3 * 5 * 4) * 5);
  EXPECT_DOUBLE_EQ(cost("reshape"), 0);
  EXPECT_DOUBLE_EQ(cost("gelu"), 4 * 8);
  EXPECT_DOUBLE_EQ(cost("conv2d"), 2 * (2 * 5 * 6 * 6) * (3 * 3 * 3));
}

TEST(CostModel, TensorParallelismTradesComputeForAllReduces) {
  Generator gen(7);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  const SymBindings batch{{"batch", 2}};
  plan::CostModel cost;
  cost.gflops = 10;
  cost.default_link = {10, 20};
  const auto time = [&](int tp) {
    return plan::step_time(step, megatron_plan(step, 1, tp, 2).plan, batch, cost);
  };
  const plan::StepTime one = time(1), two = time(2);
  EXPECT_DOUBLE_EQ(one.communication, 0);
  EXPECT_LT(two.compute, one.compute);
  EXPECT_GT(two.compute, one.compute / 2);  // LayerNorms and the residual sums stay whole
  // 10 all-reduces of an activation [2, 8, 16] f32 (1024 bytes, sent once each way on 2 devices),
  // and the vocab-parallel cross-entropy's 4 collectives of a few bytes a row, at their latency.
  EXPECT_NEAR(two.communication, 10 * (20e-6 + 1024 / 10e9) + 4 * 20e-6, 1e-12);
  // Links measured for this mesh come before the axis' and the default ones.
  cost.links["tp"] = {1, 1000};
  cost.mesh_links["dp=1 x tp=2"]["tp"] = {5, 40};
  EXPECT_NEAR(time(2).communication, 10 * (40e-6 + 1024 / 5e9) + 4 * 40e-6, 1e-12);
}

TEST(CostModel, TheSearchPicksTheFastestMeshThatFits) {
  Generator gen(8);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  const SymBindings batch{{"batch", 4}};
  plan::CostModel slow_compute;  // compute dominates: the data-parallel mesh splits the most of it
  slow_compute.gflops = 0.001;
  std::vector<plan::MeshCandidate> c = search_4(step, batch, slow_compute, 0);
  ASSERT_EQ(c.size(), 3u);  // dp4, dp2 x tp2, tp4
  EXPECT_EQ(c[0].dp, 4);
  plan::CostModel slow_links;  // communication dominates: activations are smaller than gradients here
  slow_links.gflops = 1e6;
  slow_links.default_link = {1e-3, 0};
  c = search_4(step, batch, slow_links, 0);
  EXPECT_EQ(c.back().dp, 4);
  for (std::size_t i = 1; i < c.size(); ++i) EXPECT_LE(c[i - 1].time.total(), c[i].time.total());
  // A budget only tp4 fits (it holds the least: a quarter of the weights and of the batch's logits): it comes first, whatever its time.
  const auto tp4_mesh = std::find_if(c.begin(), c.end(), [](const plan::MeshCandidate& m) { return m.tp == 4; });
  ASSERT_NE(tp4_mesh, c.end());
  const double tp4 = tp4_mesh->memory.total();
  c = search_4(step, batch, slow_compute, tp4);
  EXPECT_EQ(c[0].tp, 4);
  EXPECT_TRUE(c[0].fits);
  EXPECT_FALSE(c[1].fits);
  try {
    search_4(step, batch, slow_compute, tp4 / 4);
    ADD_FAILURE() << "a budget nothing fits was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no mesh of 4 devices fits"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(dp=1 x tp=4)"), std::string::npos) << e.what();
  }
}

// With the model's split into stages the search tries pipelines too: on 2 devices dp2, tp2 and
// pp2 (the tiny GPT's two blocks one a stage), pp2 predicted as plan::pipeline_cost makes it of
// its stages' costs; a budget only the pipeline fits (each stage holds half the weights and one or
// two micro-batches' activations) puts it first.
TEST(CostModel, TheSearchTriesPipelinesWithTheModelsStages) {
  Generator gen(8);
  test::TinyGpt model(gen);
  const SymDim b = SymDim::symbol("batch");
  const std::vector<InputSpec> signature{{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}};
  plan::CostModel cost;
  cost.gflops = 0.001;
  plan::MeshSearch q{model.step(), 2, models::megatron_gpt_policy(4), {{"batch", 8}}, cost, 0, 8};
  q.stages = model.stages();
  q.signature = signature;
  q.micro_batches = 4;
  std::vector<plan::MeshCandidate> c = plan::search_meshes(q);
  ASSERT_EQ(c.size(), 3u);  // dp2, tp2, pp2
  const auto piped = std::find_if(c.begin(), c.end(), [](const plan::MeshCandidate& m) { return m.pp == 2; });
  ASSERT_NE(piped, c.end());
  EXPECT_EQ(piped->dp, 1);
  EXPECT_EQ(piped->tp, 1);
  // The same figures from the stages' costs: micro-batches of 2 rows, 1F1B's 2 and 1 in flight.
  const std::vector<TracedFunction> steps = plan::trace_stage_steps(model.stages(), {1, 1}, signature);
  std::vector<plan::StageCost> stages;
  for (int s = 0; s < 2; ++s) {
    const Mesh one{{{"tp", 1}}};
    stages.push_back(plan::stage_cost(steps[static_cast<std::size_t>(s)],
                                      propagate_sharding(steps[static_cast<std::size_t>(s)].graph(), one, {}, {}, {{"batch", 2}}),
                                      {{"batch", 2}}, cost, 1, 2 - s, 8));
  }
  const plan::PipelineCost expected = plan::pipeline_cost(stages, 4);
  EXPECT_NEAR(piped->time.total(), expected.step, 1e-9 * expected.step);
  EXPECT_DOUBLE_EQ(piped->bubble, expected.bubble);
  const auto dp2 = std::find_if(c.begin(), c.end(), [](const plan::MeshCandidate& m) { return m.dp == 2; });
  ASSERT_NE(dp2, c.end());
  EXPECT_LT(piped->memory.total(), dp2->memory.total());
  q.memory_budget = piped->memory.total();
  c = plan::search_meshes(q);
  EXPECT_EQ(c[0].pp, 2);
  EXPECT_TRUE(c[0].fits);
}

// The search knows no model: a policy brings the placement and the tp it splits among. One that
// replicates everything along tp and refuses tp=4 leaves dp4 and dp2 x tp2, and none at all is
// an error naming the policy.
TEST(CostModel, TheSearchTakesAnyModelsPolicy) {
  Generator gen(8);
  test::TinyGpt model(gen);
  plan::PlacementPolicy replicated;
  replicated.name = "replicated";
  replicated.place = [](const TracedFunction& step, const Mesh& mesh, bool) {
    plan::PlacementRequest r;
    for (ValueId v : step.graph().inputs()) r.given[v] = {Placement::split(0), Placement::broadcast()};
    for (ValueId v : step.graph().outputs()) r.required[v] = {Placement::broadcast(), Placement::broadcast()};
    (void)mesh;
    return r;
  };
  replicated.splits = [](int tp) { return tp < 4; };
  plan::CostModel cost;
  const std::vector<plan::MeshCandidate> c = plan::search_meshes({model.step(), 4, replicated, {{"batch", 4}}, cost});
  ASSERT_EQ(c.size(), 2u);
  for (const plan::MeshCandidate& m : c) EXPECT_LT(m.tp, 4);
  replicated.splits = [](int) { return false; };
  test::expect_error_mentions([&] { plan::search_meshes({model.step(), 4, replicated, {{"batch", 4}}, cost}); },
                              {"replicated placement"});
}

// ZeRO-1 (the article's enable_parallel_optimizer): each gradient is reduce-scattered over dp
// instead of all-reduced, each rank keeps the optimizer state of its shard (half, on dp=2; the
// gradients stay whole, as the runtime's reduce-scatter writes into whole buffers), and the updated
// parameters are all-gathered: the same bytes as the all-reduce; the update itself is half as long.
TEST(Planning, ZeroOneShardsTheOptimizerStateOverDataParallelRanks) {
  Generator gen(9);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  const SymBindings batch{{"batch", 4}};
  plan::CostModel cost;
  cost.default_link = {10, 0};
  const GraphPlacement plain = megatron_plan(step, 2, 1, 4).plan, zero = megatron_plan(step, 2, 1, 4, true).plan;
  for (const Transition& t : communicating(zero)) {
    if (t.value == step.graph().outputs()[0]) continue;  // the loss is all-reduced; every gradient reduce-scattered
    EXPECT_EQ(t.collective, Collective::reduce_scatter) << "value " << t.value;
  }
  const plan::DeviceMemory m0 = plan::device_memory(step, plain, batch, 8), m1 = plan::device_memory(step, zero, batch, 8);
  EXPECT_DOUBLE_EQ(m1.parameters, m0.parameters);
  EXPECT_DOUBLE_EQ(m1.gradients, m0.gradients);
  EXPECT_DOUBLE_EQ(m1.optimizer_state, m0.optimizer_state / 2);
  const plan::StepTime t0 = plan::step_time(step, plain, batch, cost), t1 = plan::step_time(step, zero, batch, cost);
  EXPECT_NEAR(t1.communication, t0.communication, 1e-12);
  EXPECT_NEAR(t1.optimizer, t0.optimizer / 2, 1e-15);
  EXPECT_GT(t0.optimizer, 0);
}

// Bucket sizes from a link: latency at most 1% of a bucket's transfer, within 0.25-64 MiB; the
// measured link is the ranks' mean, the same on every rank, like any figures the ranks agree on.
TEST(Planning, BucketSizesFollowTheMeasuredLink) {
  const plan::BucketSizes shm = plan::choose_buckets({6.4, 17}), tcp = plan::choose_buckets({0.12, 95});
  EXPECT_NEAR(shm.fusion_mb, 99 * 17e-6 * 6.4e9 / (1 << 20), 1e-9);  // 10.3 MiB
  EXPECT_DOUBLE_EQ(shm.first_mb, 1);
  EXPECT_NEAR(tcp.fusion_mb, 1.076, 1e-3);
  EXPECT_DOUBLE_EQ(plan::choose_buckets({0.01, 1}).fusion_mb, 0.25);
  EXPECT_DOUBLE_EQ(plan::choose_buckets({0.01, 1}).first_mb, 0.25);
  EXPECT_DOUBLE_EQ(plan::choose_buckets({100, 1000}).fusion_mb, 64);

  auto world = transport::make_inprocess_world(2);
  std::vector<plan::CostModel::Link> links(2);
  std::vector<std::vector<double>> figures(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      transport::Communicator comm(std::move(world[static_cast<std::size_t>(r)]), "allreduce");
      links[static_cast<std::size_t>(r)] = plan::measure_link(comm);
      // What each rank measured itself (its GFLOP/s, say) becomes the ranks' mean on every rank.
      figures[static_cast<std::size_t>(r)] = plan::agree_on_means(comm, {10.0 + r, -3.0 * r});
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_GT(links[0].gbytes_per_s, 0);
  EXPECT_GT(links[0].latency_us, 0);
  EXPECT_EQ(links[0].gbytes_per_s, links[1].gbytes_per_s);
  EXPECT_EQ(links[0].latency_us, links[1].latency_us);
  EXPECT_EQ(figures[0], (std::vector<double>{10.5, -1.5}));
  EXPECT_EQ(figures[1], figures[0]);
}

// The links of every candidate mesh's groups, measured on groups made as the job would make them
// (here in-process worlds, one per group of a partition): on 4 ranks, the tp and dp axes of dp2 x
// tp2 and the single axis of dp4 and of tp4, the same figures on every rank; a mesh's measured
// links are the ones the cost model charges its collectives at.
TEST(Planning, EachCandidateMeshsGroupsHaveTheirLinksMeasured) {
  constexpr int kRanks = 4;
  auto world = transport::make_inprocess_world(kRanks);
  std::mutex mu;
  std::map<std::pair<int, std::vector<int>>, std::vector<std::unique_ptr<transport::Transport>>> groups;  // by (call, members)
  std::vector<std::map<std::string, std::map<std::string, plan::CostModel::Link>>> measured(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      transport::Communicator comm(std::move(world[static_cast<std::size_t>(r)]), "world");
      int calls = 0;
      const plan::GroupMaker group = [&](const std::vector<int>& members, const char* name) {
        std::unique_ptr<transport::Transport> mine;
        {
          const std::lock_guard<std::mutex> lock(mu);
          auto& made = groups[{calls++, members}];
          if (made.empty()) made = transport::make_inprocess_world(static_cast<int>(members.size()));
          mine = std::move(made[static_cast<std::size_t>(std::find(members.begin(), members.end(), r) - members.begin())]);
        }
        return std::make_shared<transport::Communicator>(std::move(mine), name);
      };
      measured[static_cast<std::size_t>(r)] = plan::measure_mesh_links(comm, {1, 2, 4}, group);
    });
  for (std::thread& t : ranks) t.join();
  const auto& links = measured[0];
  ASSERT_EQ(links.size(), 3u);
  EXPECT_EQ(links.at("dp=4 x tp=1").size(), 1u);
  EXPECT_EQ(links.at("dp=1 x tp=4").size(), 1u);
  for (const auto& [axis, link] : links.at("dp=2 x tp=2")) {
    EXPECT_GT(link.gbytes_per_s, 0) << axis;
    EXPECT_GT(link.latency_us, 0) << axis;
  }
  EXPECT_EQ(links.at("dp=2 x tp=2").size(), 2u);
  for (int r = 1; r < kRanks; ++r)
    for (const auto& [mesh, axes] : links)
      for (const auto& [axis, link] : axes) {
        EXPECT_EQ(measured[static_cast<std::size_t>(r)].at(mesh).at(axis).gbytes_per_s, link.gbytes_per_s) << mesh << " " << axis;
        EXPECT_EQ(measured[static_cast<std::size_t>(r)].at(mesh).at(axis).latency_us, link.latency_us) << mesh << " " << axis;
      }
  EXPECT_EQ(groups.size(), 4u) << "dp2 x tp2's two tp pairs and two dp pairs; dp4 and tp4 run on the world";
}

// The planner actor answers on the engine's threads with what the search gives, and passes the
// search's errors on through the future.
TEST(Planning, ThePlannerActorAnswersWithTheSearch) {
  Generator gen(9);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  plan::CostModel cost;
  cost.gflops = 0.001;  // compute dominates: dp=4 first
  actors::Engine engine(actors::EngineOptions{1});
  actors::Planner planner(engine);
  std::future<std::vector<plan::MeshCandidate>> answer = planner.ask({step, 4, models::megatron_gpt_policy(4), {{"batch", 4}}, cost});
  std::future<std::vector<plan::MeshCandidate>> refused = planner.ask({step, 4, models::megatron_gpt_policy(4), {{"batch", 4}}, cost, 1.0});
  const std::vector<plan::MeshCandidate> direct = search_4(step, {{"batch", 4}}, cost, 0);
  const std::vector<plan::MeshCandidate> got = answer.get();
  ASSERT_EQ(got.size(), direct.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].dp, direct[k].dp);
    EXPECT_EQ(got[k].tp, direct[k].tp);
    EXPECT_DOUBLE_EQ(got[k].time.total(), direct[k].time.total());
  }
  EXPECT_EQ(got.front().dp, 4);
  test::expect_error_mentions([&] { refused.get(); }, {"no mesh of 4 devices fits"});
}
