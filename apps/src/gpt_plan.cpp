#include "troupe/apps/gpt_plan.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "troupe/actors/planner.hpp"
#include "troupe/models/gpt_placement.hpp"
#include "troupe/plan/link.hpp"
#include "troupe/plan/propagation.hpp"
#include "troupe/plan/strategy.hpp"
#include "troupe/apps/cli.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::apps {

void add_plan_flags(CLI::App& app, PlanFlags& f) {
  app.add_option("--tp", f.tp, "tensor-parallel ranks per data-parallel replica (Megatron style; searched when absent)")
      ->check(in_range(1, 1024));
  app.add_flag("--plan-only", f.plan_only,
               "print the hybrid-parallel plan (placements, collectives, memory per rank, predicted step time) as JSON, "
               "and do not train");
  app.add_option("--zero", f.zero, "ZeRO stage: 1 shards the optimizer state over the data-parallel ranks")
      ->capture_default_str()->check(CLI::IsMember({0, 1}));
  app.add_option("--devices", f.devices, "devices to plan for with --plan-only (default: dp x tp)")->check(in_range(1, 65536));
  app.add_option("--mem-per-rank", f.mem_per_rank, "memory budget per rank in bytes, for the planner (0: none)")
      ->capture_default_str()->check(in_range(0, 1e15));
  app.add_option("--link-gbps", f.link_gbps, "the ranks' link bandwidth in GB/s, for the planner's cost model")
      ->capture_default_str()->check(open_range(0, 1e6, "GB/s"));
  app.add_option("--link-latency-us", f.link_latency_us, "the ranks' link latency per collective in microseconds")
      ->capture_default_str()->check(in_range(0, 1e7));
  app.add_option("--tp-link-gbps", f.tp_link_gbps,
                 "the tp ranks' link in GB/s when it differs from --link-gbps (tensor parallelism within a host; 0: the same)")
      ->capture_default_str()->check(in_range(0, 1e6));
  app.add_option("--tp-link-latency-us", f.tp_link_latency_us, "the tp ranks' link latency per collective (0: --link-latency-us)")
      ->capture_default_str()->check(in_range(0, 1e7));
  app.add_option("--gflops", f.gflops, "each device's GFLOP/s for the planner's cost model (0: measured on this machine)")
      ->capture_default_str()->check(in_range(0, 1e9));
  app.add_option("--update-gbps", f.update_gbps,
                 "each device's memory bandwidth in GB/s for the optimizer's update, for the cost model (0: measured here)")
      ->capture_default_str()->check(in_range(0, 1e6));
  app.add_option("--strategy-save", f.strategy_save, "write the chosen plan to this strategy file (JSON)");
  app.add_option("--strategy-load", f.strategy_load, "take the plan from this strategy file instead of planning")
      ->excludes(app.get_option("--strategy-save"));
}

namespace {

// This machine's GFLOP/s at a 256 x 256 f32 product, the size of the steps' products: the best of
// five rounds of 20, after a warm-up (the first calls build oneDNN's kernels).
double measured_gflops() {
  Generator gen(1);
  Tensor a = Tensor::empty({256, 256}), b = Tensor::empty({256, 256});
  gen.uniform_(a, -1, 1);
  gen.uniform_(b, -1, 1);
  graph::NoGradGuard no_grad;
  constexpr int reps = 20;
  for (int i = 0; i < reps; ++i) (void)graph::matmul(a, b).tensor();
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) (void)graph::matmul(a, b).tensor();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * 256 * 256 * 256 * reps / s / 1e9);
  }
  return best;
}

// This machine's bandwidth at AdamW's update, in GB/s of the 28 bytes an element it streams: the
// best of five updates of 4M elements (larger than the caches, as a model's parameters are).
double measured_update_gbps() {
  constexpr std::int64_t n = 1 << 22;
  Generator gen(2);
  Tensor p = Tensor::empty({n}), g = Tensor::empty({n}), m = Tensor::zeros({n}), v = Tensor::zeros({n});
  gen.uniform_(p, -1, 1);
  gen.uniform_(g, -1, 1);
  double best = 0;
  for (int round = 0; round < 6; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::adamw_update_(p, g, m, v, kernels::AdamWParams{}, round + 1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (round > 0) best = std::max(best, 28.0 * n / s / 1e9);
  }
  return best;
}

double mib(double bytes) { return bytes / (1 << 20); }

// The cost model the flags give: --gflops and --update-gbps (measured on this machine when 0), the
// links of --link-gbps and --link-latency-us, the tp axis' of --tp-link-gbps and --tp-link-latency-us.
plan::CostModel flag_cost_model(const PlanFlags& f) {
  plan::CostModel cost;
  cost.gflops = f.gflops > 0 ? f.gflops : measured_gflops();
  cost.update_gbps = f.update_gbps > 0 ? f.update_gbps : measured_update_gbps();
  cost.default_link = {f.link_gbps, f.link_latency_us};
  if (f.tp_link_gbps > 0 || f.tp_link_latency_us > 0)
    cost.links["tp"] = {f.tp_link_gbps > 0 ? f.tp_link_gbps : cost.default_link.gbytes_per_s,
                        f.tp_link_latency_us > 0 ? f.tp_link_latency_us : cost.default_link.latency_us};
  return cost;
}

// The planner actor's candidates for `world` devices, fastest first among those that fit, each
// printed when `print` (troupe-gpt: candidate dp=.. x tp=..: predicted .. ms, .. MiB per rank).
std::vector<plan::MeshCandidate> ask_planner(const PlanFlags& f, const graph::TracedFunction& step, int world,
                                               std::int64_t heads, const graph::SymBindings& bindings,
                                               const plan::CostModel& cost, bool print) {
  actors::Engine engine(actors::EngineOptions{1});
  actors::Planner planner(engine);
  const std::vector<plan::MeshCandidate> candidates =
      planner.ask({step, world, models::megatron_gpt_policy(heads), bindings, cost, f.mem_per_rank, 8, f.zero == 1}).get();
  if (print)
    for (const plan::MeshCandidate& c : candidates)
      std::printf("troupe-gpt: candidate dp=%d x tp=%d: predicted %.3f ms, %.2f MiB per rank%s\n", c.dp, c.tp,
                  c.time.total() * 1e3, mib(c.memory.total()), c.fits ? "" : " (over the budget)");
  return candidates;
}

}  // namespace

std::pair<int, int> search_training_mesh(const PlanFlags& f, const graph::TracedFunction& step, std::int64_t heads,
                                         std::int64_t global_batch, transport::Communicator& world,
                                         const plan::GroupMaker& group, bool tensor_parallel) {
  plan::CostModel cost = flag_cost_model(f);
  // Each rank measured its own figures: all plan with the ranks' means, so all choose alike.
  const std::vector<double> agreed = plan::agree_on_means(world, {cost.gflops, cost.update_gbps});
  cost.gflops = agreed[0];
  cost.update_gbps = agreed[1];
  std::vector<int> tps;  // the meshes the planner may choose, whose groups' links it measures
  for (int tp = 1; tp <= world.size(); ++tp)
    if (world.size() % tp == 0 && heads % tp == 0 && (tp == 1 || tensor_parallel)) tps.push_back(tp);
  cost.mesh_links = plan::measure_mesh_links(world, tps, group);
  const bool print = world.rank() == 0;
  if (print) {
    std::printf("troupe-gpt: planning %d ranks (no --dp, no --tp): %.1f GFLOP/s and update %.1f GB/s measured; links",
                world.size(), cost.gflops, cost.update_gbps);
    for (const auto& [mesh, links] : cost.mesh_links)
      for (const auto& [axis, link] : links) std::printf(" %s %s %.3f GB/s %.0f us;", mesh.c_str(), axis.c_str(), link.gbytes_per_s, link.latency_us);
    std::printf("\n");
  }
  const std::vector<plan::MeshCandidate> candidates =
      ask_planner(f, step, world.size(), heads, {{"batch", global_batch}}, cost, print);
  for (const plan::MeshCandidate& c : candidates) {
    if (!c.fits || (c.tp > 1 && !tensor_parallel) || (f.zero == 1 && c.dp == 1)) continue;
    if (print) std::printf("troupe-gpt: planner chose dp=%d x tp=%d\n", c.dp, c.tp);
    return {c.dp, c.tp};
  }
  fail(ErrorKind::invalid_argument, "planner: no mesh of ", world.size(), " ranks splits the global batch of ", global_batch,
       " among its replicas", tensor_parallel ? "" : " without tensor parallelism (these settings rule it out: give --tp to see why)",
       f.zero == 1 ? " with 2 or more replicas for ZeRO-1" : "", " and fits the memory; give --dp and --tp, or another --batch");
}

graph::GraphPlacement gpt_training_plan(const PlanFlags& f, const graph::TracedFunction& step, std::int64_t heads, int dp,
                                      int tp, std::int64_t batch, bool write) {
  const graph::Mesh mesh = plan::job_mesh(dp, tp, dp * tp);
  const plan::PlacementRequest request =
      f.strategy_load.empty() ? models::megatron_gpt_placement(step, mesh, heads, f.zero == 1)
                              : plan::strategy_request(plan::load_strategy(f.strategy_load), step, mesh, f.strategy_load);
  // ZeRO-1 is the runtime's (DataParallel::zero): a strategy that splits the gradients over dp needs --zero 1.
  for (const auto& [v, p] : request.required)
    TROUPE_CHECK(f.zero == 1 || dp == 1 || p[0].kind != graph::Placement::Kind::split, invalid_argument, "strategy file '",
                 f.strategy_load, "' splits the gradients over dp (ZeRO-1); train it with --zero 1");
  if (write && !f.strategy_save.empty()) {
    const graph::SymBindings bindings{{"batch", batch * dp}};
    const graph::GraphPlacement whole = plan::propagate_sharding(step.graph(), mesh, request.given, request.required, bindings);
    plan::save_strategy(f.strategy_save, plan::make_strategy(step, mesh, request, whole));
  }
  const auto [tp_mesh, along_tp] = plan::project_request(request, mesh, "tp");
  return plan::propagate_sharding(step.graph(), tp_mesh, along_tp.given, along_tp.required, {{"batch", batch}});
}

int plan_only(const PlanFlags& f, const models::GptConfig& config, std::int64_t batch, int dp, std::uint64_t seed) {
  config.validate();
  Generator gen(seed);
  models::Gpt model(config, gen);
  const graph::SymDim b = graph::SymDim::symbol("batch");
  const graph::TracedFunction step =
      graph::trace([&](const std::vector<graph::Var>& in) { return std::vector<graph::Var>{model.loss(in[0], in[1])}; },
                   {{"ids", {b, config.seq}, DType::i64}, {"targets", {b, config.seq}, DType::i64}})
          .with_gradients();
  // The global batch: --batch per data-parallel rank, as training with --dp reads it; a searched
  // mesh with another dp splits the same sequences.
  const graph::SymBindings bindings{{"batch", batch * dp}};
  const plan::CostModel cost = flag_cost_model(f);
  const int world = f.devices > 0 ? f.devices : dp * (f.tp > 0 ? f.tp : 1);
  nlohmann::json out{{"app", "troupe-gpt"}, {"plan_only", true}, {"devices", world}, {"global_batch", batch * dp}, {"zero", f.zero},
                     {"gflops", cost.gflops}, {"update_gbps", cost.update_gbps},
                     {"link_gbps", f.link_gbps}, {"link_latency_us", f.link_latency_us}};

  graph::Mesh mesh;
  plan::PlacementRequest request;
  if (!f.strategy_load.empty()) {
    const plan::Strategy s = plan::load_strategy(f.strategy_load);
    mesh = s.mesh;
    request = plan::strategy_request(s, step, mesh, f.strategy_load);
    out["strategy_loaded"] = f.strategy_load;
  } else if (f.tp > 0) {
    mesh = plan::job_mesh(world / f.tp, f.tp, world);
    request = models::megatron_gpt_placement(step, mesh, config.heads, f.zero == 1);
  } else {
    const std::vector<plan::MeshCandidate> candidates = ask_planner(f, step, world, config.heads, bindings, cost, true);
    out["candidates"] = nlohmann::json::array();
    for (const plan::MeshCandidate& c : candidates) {
      out["candidates"].push_back({{"dp", c.dp}, {"tp", c.tp}, {"predicted_ms", c.time.total() * 1e3},
                                   {"memory_bytes", c.memory.total()}, {"fits", c.fits}});
    }
    mesh = plan::job_mesh(candidates.front().dp, candidates.front().tp, world);
    request = models::megatron_gpt_placement(step, mesh, config.heads, f.zero == 1);
  }
  const graph::Graph& g = step.graph();
  const graph::GraphPlacement placed = plan::propagate_sharding(g, mesh, request.given, request.required, bindings);
  const plan::StepTime time = plan::step_time(step, placed, bindings, cost);
  const plan::DeviceMemory memory = plan::device_memory(step, placed, bindings, 8);
  if (!f.strategy_save.empty()) plan::save_strategy(f.strategy_save, plan::make_strategy(step, mesh, request, placed));

  std::map<std::pair<std::string, std::string>, std::pair<int, double>> by_kind;  // (axis, collective) -> count, bytes
  nlohmann::json collectives = nlohmann::json::array();
  for (const graph::Transition& t : placed.transitions) {
    if (t.collective == graph::Collective::local) continue;
    const std::string axis = mesh.axes[static_cast<std::size_t>(t.mesh_axis)].first;
    auto& k = by_kind[{axis, graph::to_string(t.collective)}];
    ++k.first;
    k.second += t.bytes;
    const graph::Value& value = g.value(t.value);
    const std::string producer = value.producer >= 0 ? g.nodes()[static_cast<std::size_t>(value.producer)].op : "input";
    collectives.push_back({{"value", value.name.empty() ? "%" + std::to_string(t.value) : value.name},
                           {"producer", producer},
                           {"consumer", t.consumer >= 0 ? g.nodes()[static_cast<std::size_t>(t.consumer)].op : "(where made)"},
                           {"axis", axis}, {"collective", graph::to_string(t.collective)}, {"from", t.from.str()},
                           {"to", t.to.str()}, {"bytes", t.bytes}});
  }
  std::printf("troupe-gpt: plan %s on %d devices: predicted step %.3f ms (compute %.3f, communication %.3f, "
              "optimizer %.3f)\n",
              mesh.str().c_str(), world, time.total() * 1e3, time.compute * 1e3, time.communication * 1e3,
              time.optimizer * 1e3);
  std::printf("troupe-gpt: memory per rank %.2f MiB: parameters %.2f, gradients %.2f, optimizer state %.2f, "
              "activations %.2f\n", mib(memory.total()), mib(memory.parameters), mib(memory.gradients),
              mib(memory.optimizer_state), mib(memory.activations));
  for (const auto& [kind, k] : by_kind)
    std::printf("troupe-gpt: %d %s on %s, %.0f bytes per rank\n", k.first, kind.second.c_str(), kind.first.c_str(), k.second);
  nlohmann::json ops = nlohmann::json::array();
  for (const graph::Node& n : g.nodes()) {
    nlohmann::json outs = nlohmann::json::array();
    for (graph::ValueId v : n.outputs) outs.push_back(graph::placement_strings(placed.placements.at(v)));
    ops.push_back({{"op", n.op}, {"backward", n.backward}, {"outputs", outs}});
  }
  nlohmann::json params = nlohmann::json::array();
  for (graph::ValueId v : g.parameters())
    params.push_back({{"name", g.value(v).name}, {"placement", graph::placement_strings(placed.placements.at(v))}});
  out["mesh"] = mesh.str();
  out["predicted_ms"] = time.total() * 1e3;
  out["predicted_compute_ms"] = time.compute * 1e3;
  out["predicted_communication_ms"] = time.communication * 1e3;
  out["predicted_optimizer_ms"] = time.optimizer * 1e3;
  out["memory_per_rank"] = {{"parameters", memory.parameters}, {"gradients", memory.gradients},
                            {"optimizer_state", memory.optimizer_state}, {"activations", memory.activations},
                            {"total", memory.total()}};
  out["parameters"] = params;
  out["collectives"] = collectives;
  out["ops"] = ops;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace troupe::apps
