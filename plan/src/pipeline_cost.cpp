// The planner's model of a pipelined step (troupe/plan/pipeline_cost.hpp).
#include "troupe/plan/pipeline_cost.hpp"

#include <algorithm>

#include "troupe/kernels/error.hpp"

namespace troupe::plan {

namespace {

// The link of mesh axis `axis`: its own when the model lists one, else the default.
const CostModel::Link& link_of(const CostModel& cost, const std::string& axis) {
  const auto it = cost.links.find(axis);
  return it != cost.links.end() ? it->second : cost.default_link;
}

double seconds(const CostModel::Link& link, double bytes) { return link.latency_us * 1e-6 + bytes / (link.gbytes_per_s * 1e9); }

}  // namespace

double StageCost::peak_bytes() const { return memory.parameters + memory.optimizer_state + step_bytes(); }

double StageCost::step_bytes() const { return memory.gradients + in_flight * memory.activations; }

StageCost stage_cost(const graph::TracedFunction& step, const graph::GraphPlacement& plan, const graph::SymBindings& bindings,
                     const CostModel& cost, int dp, int in_flight, double optimizer_bytes_per_parameter) {
  TROUPE_CHECK(dp >= 1 && in_flight >= 1, invalid_argument, "stage_cost: ", dp, " replicas, ", in_flight, " micro-batches held");
  StageCost c;
  const StepTime t = step_time(step, plan, bindings, cost);
  c.micro_batch.compute = t.compute;
  c.micro_batch.communication = t.communication;
  c.optimizer = t.optimizer;
  c.memory = device_memory(step, plan, bindings, optimizer_bytes_per_parameter);
  c.in_flight = in_flight;
  if (dp > 1)
    c.gradient_sync = seconds(link_of(cost, "dp"), graph::collective_bytes(graph::Collective::all_reduce, c.memory.gradients, dp));
  // The sends: a stage's output and the received input's gradient, whole on every tp device.
  const graph::Graph& g = step.graph();
  for (const graph::Node& n : g.nodes())
    if (n.op == "pipe_send") {
      const graph::ValueInfo& sent = g.value(n.inputs.at(0)).info;
      c.transfer += seconds(link_of(cost, "pp"), static_cast<double>(shape_numel(graph::bind(sent.shape, bindings)) *
                                                                     static_cast<std::int64_t>(dtype_size(sent.dtype))));
    }
  return c;
}

PipelineCost pipeline_cost(std::vector<StageCost> stages, int micro_batches) {
  TROUPE_CHECK(!stages.empty() && micro_batches >= 1, invalid_argument, "pipeline_cost: ", stages.size(), " stages, ",
               micro_batches, " micro-batches");
  PipelineCost p;
  p.micro_batches = micro_batches;
  double slowest = 0, tail = 0;
  for (const StageCost& s : stages) {
    slowest = std::max(slowest, s.micro_batch.total() + s.transfer);
    tail = std::max(tail, s.gradient_sync + s.optimizer);
  }
  const double m = micro_batches, stages_count = static_cast<double>(stages.size());
  const double flowing = (m + stages_count - 1) * slowest;
  p.step = flowing + tail;
  for (const StageCost& s : stages) p.bubble += flowing > 0 ? (1 - m * s.micro_batch.total() / flowing) / stages_count : 0;
  p.stages = std::move(stages);
  return p;
}

}  // namespace troupe::plan
