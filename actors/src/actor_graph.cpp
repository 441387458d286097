#include "actor_graph.hpp"

#include <algorithm>
#include <set>

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

// Appends `spec`, which reads `spec.inputs`; an actor that reads no producer is triggered by the
// input actor. Returns its index.
int add_actor(ActorGraph& plan, ActorSpec spec) {
  for (const InputRef& r : spec.inputs)
    if (r.from == InputRef::From::producer) add_unique(spec.producers, r.producer);
  if (spec.producers.empty()) spec.producers.push_back(0);
  const int a = static_cast<int>(plan.actors.size());
  for (int p : spec.producers) add_unique(plan.actors[static_cast<std::size_t>(p)].consumers, a);
  plan.actors.push_back(std::move(spec));
  return a;
}

// Makes actor `from` a producer of actor `to` that `to` reads nothing of (a trigger).
void add_trigger(ActorGraph& plan, int from, int to) {
  add_unique(plan.actors[static_cast<std::size_t>(to)].producers, from);
  add_unique(plan.actors[static_cast<std::size_t>(from)].consumers, to);
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

// The graph nodes of each op actor, in node order (Grouping). A node may join the actor of the
// node before it, in the graph's order (the schedule the passes chose: recomputation puts a
// recomputed value right before its reader, and joining an earlier actor would compute it early
// and keep it alive), when that actor is the last one it reads (the highest index: actors stay in
// topological order, so nothing that actor leads to can feed the node, and no cycle forms) and
// every other actor it reads is upstream of that one: then the joined act waits for nothing it
// did not wait for already.
std::vector<std::vector<graph::NodeId>> group_nodes(const graph::Graph& g, const std::vector<bool>& step_node,
                                                    const Grouping& grouping) {
  std::vector<std::vector<graph::NodeId>> groups;
  if (!grouping.cheap_ops && !grouping.products) {
    for (const graph::Node& n : g.nodes())
      if (!step_node[static_cast<std::size_t>(n.id)]) groups.push_back({n.id});
    return groups;
  }
  const graph::OpRegistry& ops = graph::OpRegistry::instance();
  std::vector<int> group_of(g.values().size(), -1);  // producing group, -1: none (inputs, parameters, step values)
  std::vector<std::vector<bool>> upstream;  // per group: the groups it waits for, directly or not
  std::vector<bool> alone;                  // per group: a collective, whose act suspends
  for (const graph::Node& n : g.nodes()) {
    if (step_node[static_cast<std::size_t>(n.id)]) continue;
    const graph::OpDef& def = ops.get(n.op);
    std::vector<int> reads;
    int into = -1;
    for (graph::ValueId v : n.inputs)
      if (const int r = group_of[static_cast<std::size_t>(v)]; r >= 0) {
        add_unique(reads, r);
        into = std::max(into, r);
      }
    if (into >= 0 && into + 1 == static_cast<int>(groups.size())) {
      const auto at = static_cast<std::size_t>(into);
      const bool waits_already = std::all_of(reads.begin(), reads.end(), [&](int r) {
        return r == into || upstream[at][static_cast<std::size_t>(r)];
      });
      const bool joins = def.counts_arithmetic() ? grouping.products : grouping.cheap_ops;
      if (!waits_already || alone[at] || def.collective || !joins) into = -1;
    } else {
      into = -1;
    }
    if (into < 0) {
      into = static_cast<int>(groups.size());
      groups.emplace_back();
      upstream.emplace_back(groups.size(), false);
      for (int r : reads) {
        upstream.back()[static_cast<std::size_t>(r)] = true;
        const std::vector<bool>& above = upstream[static_cast<std::size_t>(r)];
        for (std::size_t u = 0; u < above.size(); ++u)
          if (above[u]) upstream.back()[u] = true;
      }
      alone.push_back(def.collective != nullptr);
    }
    const auto at = static_cast<std::size_t>(into);
    groups[at].push_back(n.id);
    for (graph::ValueId v : n.outputs) group_of[static_cast<std::size_t>(v)] = into;
  }
  return groups;
}

// The register index of value `v` in the op actor that makes it, added to its register on first use.
int register_index(ActorGraph& plan, const std::vector<std::pair<int, int>>& made_by, int actor, graph::ValueId v) {
  auto& outputs = plan.actors[static_cast<std::size_t>(actor)].outputs;
  const std::pair<int, int> member_output = made_by[static_cast<std::size_t>(v)];
  const auto at = std::find(outputs.begin(), outputs.end(), member_output);
  if (at != outputs.end()) return static_cast<int>(at - outputs.begin());
  outputs.push_back(member_output);
  return static_cast<int>(outputs.size()) - 1;
}

}  // namespace

ActorGraph lower_to_actors(const graph::TracedFunction& fn, const Grouping& grouping) {
  const graph::Graph& g = fn.graph();
  ActorGraph plan;
  ActorSpec input;
  input.kind = ActorSpec::Kind::input;
  input.name = "input";
  plan.actors.push_back(std::move(input));
  std::vector<InputRef> source = value_sources(g);
  std::vector<bool> step_node(g.nodes().size(), false);
  for (const graph::Node& n : g.nodes()) {
    if (!once_per_step(g, n, source)) continue;
    step_node[static_cast<std::size_t>(n.id)] = true;
    StepNode step{n.id, {}};
    for (graph::ValueId v : n.inputs) step.inputs.push_back(source[static_cast<std::size_t>(v)].parameter);
    InputRef& r = source[static_cast<std::size_t>(n.outputs[0])];
    r.from = InputRef::From::parameter;
    r.parameter = static_cast<int>(g.parameters().size() + plan.step_nodes.size());
    plan.step_nodes.push_back(std::move(step));
  }
  // Op outputs: (member, output) within their actor; source[v].producer says which actor.
  std::vector<std::pair<int, int>> made_by(g.values().size(), {-1, 0});
  const auto read = [&](graph::ValueId v) {
    InputRef r = source[static_cast<std::size_t>(v)];
    if (r.from == InputRef::From::producer && r.producer > 0) r.output = register_index(plan, made_by, r.producer, v);
    return r;
  };
  for (const std::vector<graph::NodeId>& nodes : group_nodes(g, step_node, grouping)) {
    const int a = static_cast<int>(plan.actors.size());
    ActorSpec spec;
    spec.kind = ActorSpec::Kind::op;
    std::vector<graph::ValueId> read_values;  // the values behind spec.inputs
    for (graph::NodeId id : nodes) {
      const graph::Node& n = g.node(id);
      Member m{id, n.op + " %" + std::to_string(n.outputs.empty() ? n.id : n.outputs[0]), {}};
      for (graph::ValueId v : n.inputs) {
        const InputRef& r = source[static_cast<std::size_t>(v)];
        if (r.from == InputRef::From::producer && r.producer == a) {
          m.inputs.push_back({made_by[static_cast<std::size_t>(v)].first, made_by[static_cast<std::size_t>(v)].second});
          continue;
        }
        auto at = std::find(read_values.begin(), read_values.end(), v);
        if (at == read_values.end()) {
          spec.inputs.push_back(read(v));
          at = read_values.insert(read_values.end(), v);
        }
        m.inputs.push_back({-1, static_cast<int>(at - read_values.begin())});
      }
      for (std::size_t i = 0; i < n.outputs.size(); ++i) {
        InputRef& r = source[static_cast<std::size_t>(n.outputs[i])];
        r.producer = a;
        made_by[static_cast<std::size_t>(n.outputs[i])] = {static_cast<int>(spec.members.size()), static_cast<int>(i)};
      }
      spec.members.push_back(std::move(m));
    }
    spec.name = spec.members[0].name;
    if (spec.members.size() > 1) spec.name += " +" + std::to_string(spec.members.size() - 1);
    add_actor(plan, std::move(spec));
    // A pipeline's sends and receives keep their own channel's order (OpDef::point_to_point).
    const graph::OpDef& def = graph::OpRegistry::instance().get(g.node(nodes[0]).op);
    if (def.collective && !def.point_to_point) plan.collectives.push_back(a);
    ++plan.op_count;
  }
  for (std::size_t k = 0; k < g.outputs().size(); ++k) {
    int param = -1;
    ActorSpec spec = sink_spec(fn, k, param);
    spec.inputs.push_back(read(g.outputs()[k]));
    plan.sinks.push_back(add_actor(plan, std::move(spec)));
    plan.sink_param.push_back(param);
  }
  return plan;
}

namespace {

// Numbers the actors again so that every producer comes before its consumers, keeping the
// order they had wherever the edges allow (the input actor stays 0), and every index that names
// an actor follows.
void number_topologically(ActorGraph& plan) {
  const std::size_t n = plan.actors.size();
  std::vector<int> waiting(n, 0), order;
  for (const ActorSpec& spec : plan.actors)
    for (int c : spec.consumers) ++waiting[static_cast<std::size_t>(c)];
  std::set<int> ready;
  for (std::size_t a = 0; a < n; ++a)
    if (waiting[a] == 0) ready.insert(static_cast<int>(a));
  while (!ready.empty()) {
    const int a = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(a);
    for (int c : plan.actors[static_cast<std::size_t>(a)].consumers)
      if (--waiting[static_cast<std::size_t>(c)] == 0) ready.insert(c);
  }
  TROUPE_CHECK(order.size() == n, runtime, "actor plan: its edges make a cycle");
  std::vector<int> index(n);
  for (std::size_t k = 0; k < n; ++k) index[static_cast<std::size_t>(order[k])] = static_cast<int>(k);
  const auto renumber = [&](std::vector<int>& actors) {
    for (int& a : actors) a = index[static_cast<std::size_t>(a)];
  };
  std::vector<ActorSpec> actors(n);
  for (std::size_t a = 0; a < n; ++a) {
    ActorSpec& spec = actors[static_cast<std::size_t>(index[a])] = std::move(plan.actors[a]);
    renumber(spec.producers);
    renumber(spec.consumers);
    for (InputRef& r : spec.inputs)
      if (r.from == InputRef::From::producer) r.producer = index[static_cast<std::size_t>(r.producer)];
  }
  plan.actors = std::move(actors);
  renumber(plan.sinks);
  renumber(plan.collectives);
}

}  // namespace

void defer_weight_gradients(ActorGraph& plan, const graph::Graph& g) {
  graph::NodeId send = -1;
  for (const graph::Node& n : g.nodes())
    if (n.backward && n.op == "pipe_send") send = n.id;
  if (send < 0) return;
  // The nodes the gradient's send needs, walking its inputs back.
  std::vector<bool> needed(g.nodes().size(), false);
  std::vector<graph::NodeId> todo{send};
  while (!todo.empty()) {
    const graph::NodeId n = todo.back();
    todo.pop_back();
    if (needed[static_cast<std::size_t>(n)]) continue;
    needed[static_cast<std::size_t>(n)] = true;
    for (graph::ValueId v : g.node(n).inputs)
      if (g.value(v).kind == graph::ValueKind::op_output) todo.push_back(g.value(v).producer);
  }
  // The op actors of the weight gradients: backward nodes alone, none of which the send needs.
  int sender = -1;
  std::vector<bool> deferred(plan.actors.size(), false);
  for (std::size_t a = 0; a < plan.actors.size(); ++a) {
    const ActorSpec& spec = plan.actors[a];
    if (spec.kind != ActorSpec::Kind::op) continue;
    bool weights = true;
    for (const Member& m : spec.members) {
      if (m.node == send) sender = static_cast<int>(a);
      weights = weights && g.node(m.node).backward && !needed[static_cast<std::size_t>(m.node)];
    }
    deferred[a] = weights;
  }
  TROUPE_CHECK(sender >= 0, runtime, "defer_weight_gradients: the gradient's send has no actor");
  for (std::size_t a = 0; a < plan.actors.size(); ++a) {
    if (!deferred[a]) continue;
    const std::vector<int>& producers = plan.actors[a].producers;
    if (std::none_of(producers.begin(), producers.end(), [&](int p) { return deferred[static_cast<std::size_t>(p)]; }))
      add_trigger(plan, sender, static_cast<int>(a));
  }
  // The send comes last in node order (autodiff made it last), and the actors it now triggers
  // before it: numbered again, producers first (what ActOrder and the memory plan rely on).
  number_topologically(plan);
}

void assign_streams(ActorGraph& plan, const graph::Graph& g, int streams) {
  if (streams <= 0) return;
  int next = 0;
  for (ActorSpec& spec : plan.actors) {
    if (spec.kind != ActorSpec::Kind::op) continue;
    const bool on_host = std::any_of(spec.members.begin(), spec.members.end(), [&](const Member& m) {
      const graph::OpDef& def = graph::OpRegistry::instance().get(g.node(m.node).op);
      return def.collective != nullptr || def.host_reads;
    });
    if (!on_host) spec.stream = next++ % streams;
  }
}

}  // namespace troupe::actors
