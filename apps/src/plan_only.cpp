#include "troupe/apps/plan_only.hpp"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "troupe/actors/planner.hpp"
#include "troupe/models/gpt_placement.hpp"
#include "troupe/plan/pipeline_cost.hpp"
#include "troupe/plan/propagation.hpp"
#include "troupe/plan/strategy.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::apps {

namespace {

double mib(double bytes) { return bytes / (1 << 20); }

// The cost model the flags give: --gflops and --update-gbps (measured on this machine when 0), the
// links of --link-gbps and --link-latency-us, the tp axis' of --tp-link-gbps and --tp-link-latency-us.
plan::CostModel flag_cost_model(const ParallelFlags& f) {
  plan::CostModel cost;
  cost.gflops = f.gflops > 0 ? f.gflops : plan::measure_gflops();
  cost.update_gbps = f.update_gbps > 0 ? f.update_gbps : plan::measure_update_gbps();
  cost.default_link = {f.link_gbps, f.link_latency_us};
  if (f.tp_link_gbps > 0 || f.tp_link_latency_us > 0)
    cost.links["tp"] = {f.tp_link_gbps > 0 ? f.tp_link_gbps : cost.default_link.gbytes_per_s,
                        f.tp_link_latency_us > 0 ? f.tp_link_latency_us : cost.default_link.latency_us};
  return cost;
}

// The planner actor's candidates for `world` devices, fastest first among those that fit, each
// printed when `print` (troupe-gpt: candidate dp=.. x tp=..: predicted .. ms, .. MiB per rank).
std::vector<plan::MeshCandidate> ask_planner(const ParallelFlags& f, const graph::TracedFunction& step, int world,
                                               std::int64_t heads, const graph::SymBindings& bindings,
                                               const plan::CostModel& cost, bool print) {
  actors::Engine engine(actors::EngineOptions{1});
  actors::Planner planner(engine);
  const std::vector<plan::MeshCandidate> candidates =
      planner.ask({step, world, models::megatron_gpt_policy(heads), bindings, cost, f.mem_per_rank, 8, f.zero == 1}).get();
  if (print)
    for (const plan::MeshCandidate& c : candidates) std::printf("troupe-gpt: %s\n", describe_candidate(c).c_str());
  return candidates;
}

}  // namespace

std::string describe_candidate(const plan::MeshCandidate& c) {
  char line[160];
  const std::string pp = c.pp > 1 ? " x pp=" + std::to_string(c.pp) : "";
  std::snprintf(line, sizeof line, "candidate dp=%d x tp=%d%s: predicted %.3f ms, %.2f MiB per rank%s", c.dp, c.tp, pp.c_str(),
                c.time.total() * 1e3, mib(c.memory.total()), c.fits ? "" : " (over the budget)");
  return line;
}

namespace {

// --plan-only --pp: each stage's step placed on its tp devices (Megatron's placement), its cost at
// one micro-batch of the replica's rows, and the pipelined step they make under --pp-schedule.
int plan_pipeline(const ParallelFlags& f, const models::GptConfig& config, std::int64_t batch, std::uint64_t seed,
                  int micro_batches) {
  const int dp = f.dp, tp = std::max(1, f.tp), pp = f.pp;
  TROUPE_CHECK(f.strategy_load.empty() && f.strategy_save.empty(), unsupported,
               "--plan-only --pp: strategy files hold dp x tp placements so far; drop --strategy-load/--strategy-save");
  config.validate();
  Generator gen(seed);
  models::Gpt model(config, gen);
  const std::vector<int> layers = plan::stage_layers(static_cast<int>(config.layers), pp, f.pp_layers);
  const int m = static_cast<int>(std::min<std::int64_t>(micro_batches, batch));  // a replica's --batch rows at most
  const graph::SymBindings bindings{{"batch", (batch + m - 1) / m}};  // one micro-batch (the largest)
  const plan::CostModel cost = flag_cost_model(f);
  const graph::SymDim b = graph::SymDim::symbol("batch");
  const std::vector<graph::InputSpec> signature{{"ids", {b, config.seq}, DType::i64}, {"targets", {b, config.seq}, DType::i64}};
  const graph::Mesh mesh = plan::job_mesh(dp, tp, dp * tp);
  std::vector<plan::StageCost> stages;
  const std::vector<graph::TracedFunction> steps = plan::trace_stage_steps(model.stages(), layers, signature);
  for (int s = 0; s < pp; ++s) {
    const graph::TracedFunction& step = steps[static_cast<std::size_t>(s)];
    const auto [tp_mesh, along_tp] =
        plan::project_request(models::megatron_gpt_placement(step, mesh, config.heads, f.zero == 1), mesh, "tp");
    const graph::GraphPlacement placed = plan::propagate_sharding(step.graph(), tp_mesh, along_tp.given, along_tp.required, bindings);
    const int in_flight = f.pp_schedule == "gpipe" ? m : std::min(m, pp - s);
    stages.push_back(plan::stage_cost(step, placed, bindings, cost, dp, in_flight, 8));
  }
  const plan::PipelineCost p = plan::pipeline_cost(stages, m);
  std::printf("troupe-gpt: pipeline dp=%d x tp=%d x pp=%d (%s, %d micro-batches of %lld rows): predicted step %.3f ms, "
              "bubble %.3f (balanced: %.3f)\n",
              dp, tp, pp, f.pp_schedule.c_str(), m, static_cast<long long>(bindings.at("batch")), p.step * 1e3, p.bubble,
              static_cast<double>(pp - 1) / (m + pp - 1));
  nlohmann::json out{{"app", "troupe-gpt"}, {"plan_only", true}, {"devices", dp * tp * pp}, {"global_batch", batch * dp},
                     {"mesh", "dp=" + std::to_string(dp) + " x tp=" + std::to_string(tp) + " x pp=" + std::to_string(pp)},
                     {"schedule", f.pp_schedule}, {"micro_batches", m}, {"gflops", cost.gflops}, {"update_gbps", cost.update_gbps},
                     {"predicted_ms", p.step * 1e3}, {"bubble", p.bubble}, {"stages", nlohmann::json::array()}};
  for (int s = 0; s < pp; ++s) {
    const plan::StageCost& c = p.stages[static_cast<std::size_t>(s)];
    std::printf("troupe-gpt: stage %d: %d layers, a micro-batch %.3f ms (compute %.3f, tp %.3f, sends %.3f), update %.3f ms, "
                "dp all-reduce %.3f ms; memory %.2f MiB with %d micro-batches in flight (activations %.2f MiB each)\n",
                s, layers[static_cast<std::size_t>(s)], (c.micro_batch.total() + c.transfer) * 1e3, c.micro_batch.compute * 1e3,
                c.micro_batch.communication * 1e3, c.transfer * 1e3, c.optimizer * 1e3, c.gradient_sync * 1e3,
                mib(c.peak_bytes()), c.in_flight, mib(c.memory.activations));
    out["stages"].push_back({{"layers", layers[static_cast<std::size_t>(s)]}, {"micro_batch_ms", c.micro_batch.total() * 1e3},
                             {"transfer_ms", c.transfer * 1e3}, {"optimizer_ms", c.optimizer * 1e3},
                             {"gradient_sync_ms", c.gradient_sync * 1e3}, {"in_flight", c.in_flight},
                             {"activation_bytes", c.memory.activations}, {"peak_bytes", c.peak_bytes()},
                             {"step_bytes", c.step_bytes()}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int plan_only(const ParallelFlags& f, const models::GptConfig& config, std::int64_t batch, std::uint64_t seed, int micro_batches) {
  if (f.pp > 1) return plan_pipeline(f, config, batch, seed, micro_batches);
  const int dp = f.dp;
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
