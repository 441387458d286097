#include "actor_graph.hpp"

#include <algorithm>

#include "troupe/graph/op_def.hpp"

namespace troupe::actors {

namespace {

void add_unique(std::vector<int>& v, int x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// Where each value is read from: (actor, output) for inputs and op outputs, or a parameter or
// constant read directly.
std::vector<InputRef> value_sources(const graph::Graph& g) {
  std::vector<InputRef> source(g.values().size());
  for (std::size_t k = 0; k < g.inputs().size(); ++k) {
    InputRef& r = source[static_cast<std::size_t>(g.inputs()[k])];
    r.producer = 0;
    r.output = static_cast<int>(k);
  }
  for (std::size_t k = 0; k < g.parameters().size(); ++k) {
    InputRef& r = source[static_cast<std::size_t>(g.parameters()[k])];
    r.from = InputRef::From::parameter;
    r.parameter = static_cast<int>(k);
  }
  for (const graph::Value& v : g.values())
    if (v.kind == graph::ValueKind::constant) {
      source[static_cast<std::size_t>(v.id)].from = InputRef::From::constant;
      source[static_cast<std::size_t>(v.id)].constant = v.constant;
    }
  return source;
}

// Appends `spec` reading `values`; an actor that reads no producer is triggered by the input
// actor. Returns its index.
int add_actor(ActorGraph& plan, ActorSpec spec, const std::vector<graph::ValueId>& values,
              const std::vector<InputRef>& source) {
  for (graph::ValueId v : values) {
    spec.inputs.push_back(source[static_cast<std::size_t>(v)]);
    if (spec.inputs.back().from == InputRef::From::producer) add_unique(spec.producers, spec.inputs.back().producer);
  }
  if (spec.producers.empty()) spec.producers.push_back(0);
  const int a = static_cast<int>(plan.actors.size());
  for (int p : spec.producers) add_unique(plan.actors[static_cast<std::size_t>(p)].consumers, a);
  plan.actors.push_back(std::move(spec));
  return a;
}

// The sink of graph output `k`: a gradient stage for a parameter's gradient, else an output sink.
ActorSpec sink_spec(const graph::TracedFunction& fn, std::size_t k, int& param) {
  const graph::Graph& g = fn.graph();
  ActorSpec spec;
  spec.kind = ActorSpec::Kind::sink;
  spec.sink = static_cast<int>(k);
  param = -1;
  if (k >= fn.output_count()) {
    param = static_cast<int>(fn.gradient_parameters()[k - fn.output_count()]);
    spec.name = "grad:" + g.value(g.parameters()[static_cast<std::size_t>(param)]).name;
    spec.average = true;
    spec.gradient = true;
  } else {
    spec.name = "output:" + std::to_string(k);
    spec.average = g.value(g.outputs()[k]).info.shape.empty();
  }
  return spec;
}

// True for a forward cast of parameters (or of step values): the same for every micro-batch, so
// a step computes it once (StepNode). Not for a graph output: the program writes step values over
// the last step's, which a caller must never see change.
bool once_per_step(const graph::Graph& g, const graph::Node& n, const std::vector<InputRef>& source) {
  if (n.backward || n.op != "cast") return false;
  const auto& outs = g.outputs();
  if (std::find(outs.begin(), outs.end(), n.outputs[0]) != outs.end()) return false;
  return std::all_of(n.inputs.begin(), n.inputs.end(), [&](graph::ValueId v) {
    return source[static_cast<std::size_t>(v)].from == InputRef::From::parameter;
  });
}

}  // namespace

ActorGraph lower_to_actors(const graph::TracedFunction& fn) {
  const graph::Graph& g = fn.graph();
  ActorGraph plan;
  ActorSpec input;
  input.kind = ActorSpec::Kind::input;
  input.name = "input";
  plan.actors.push_back(std::move(input));
  std::vector<InputRef> source = value_sources(g);
  for (const graph::Node& n : g.nodes()) {
    if (once_per_step(g, n, source)) {
      StepNode step{n.id, {}};
      for (graph::ValueId v : n.inputs) step.inputs.push_back(source[static_cast<std::size_t>(v)].parameter);
      InputRef& r = source[static_cast<std::size_t>(n.outputs[0])];
      r.from = InputRef::From::parameter;
      r.parameter = static_cast<int>(g.parameters().size() + plan.step_nodes.size());
      plan.step_nodes.push_back(std::move(step));
      continue;
    }
    ActorSpec spec;
    spec.kind = ActorSpec::Kind::op;
    spec.node = n.id;
    spec.name = n.op + " %" + std::to_string(n.outputs.empty() ? n.id : n.outputs[0]);
    const int a = add_actor(plan, std::move(spec), n.inputs, source);
    if (graph::OpRegistry::instance().get(n.op).collective) plan.collectives.push_back(a);
    for (std::size_t i = 0; i < n.outputs.size(); ++i) {
      InputRef& r = source[static_cast<std::size_t>(n.outputs[i])];
      r.producer = a;
      r.output = static_cast<int>(i);
    }
    ++plan.op_count;
  }
  for (std::size_t k = 0; k < g.outputs().size(); ++k) {
    int param = -1;
    ActorSpec spec = sink_spec(fn, k, param);
    plan.sinks.push_back(add_actor(plan, std::move(spec), {g.outputs()[k]}, source));
    plan.sink_param.push_back(param);
  }
  return plan;
}

}  // namespace troupe::actors
