// Recomputation (level 3, training graphs): a forward value that the backward reads, and that an
// elementwise op makes from values the backward holds anyway, is computed again right before its
// first backward reader instead of being kept from the forward to the backward. So its memory is
// free between its last forward reader and the backward: the MLP's gelu output, for one, comes
// again from the pre-activation, which bias_gelu_backward reads (PyTorch's min-cut partitioner
// and Megatron's selective recomputation do the same for such ops). The recomputed node waits
// (op after) for the backward value its reader also waits for, so the actor runtime, which fires a
// node as soon as its inputs exist, runs it beside the backward work before that reader rather
// than during the forward. The same kernel on the same inputs gives the same bits.
//
// Layer norms' outputs were tried too: on gpt-mini's training step they raised the planned peak
// (66.6 against 64.5 MB with the gelu outputs alone) and cost 10% of the step's time, so only
// elementwise ops recompute.
#include <algorithm>
#include <limits>
#include <map>

#include "passes/rewriter.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// True when forward node n is cheap to run again: an elementwise kernel op.
bool recomputable(const Node& n) {
  const OpDef& def = OpRegistry::instance().get(n.op);
  return def.in_place && def.kernel && n.outputs.size() == 1;
}

// Views of one value, which pass their input's readiness on.
bool is_view(const Node& n) { return (n.op == "reshape" || n.op == "permute") && n.inputs.size() == 1; }

// One value to recompute: the node that made it, run again, and what it waits for.
struct Plan {
  const Node* producer;
  ValueId token;  // the backward value the recomputation waits for
};

}  // namespace

Graph recompute_activations(const Graph& g) {
  const auto& nodes = g.nodes();
  const NodeId none = std::numeric_limits<NodeId>::max();
  std::vector<NodeId> first_backward_read(g.values().size(), none), last_read(g.values().size(), -1);
  // Values a backward node reads for their shape only (broadcast_to's `like`, say): a recomputation
  // would be read in their place for nothing, so they are kept as they are.
  std::vector<bool> shape_read(g.values().size(), false);
  for (const Node& n : nodes)
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const auto v = static_cast<std::size_t>(n.inputs[i]);
      last_read[v] = n.id;
      if (!n.backward) continue;
      first_backward_read[v] = std::min(first_backward_read[v], n.id);
      if (!OpRegistry::instance().get(n.op).differentiable(i)) shape_read[v] = true;
    }
  for (ValueId v : g.outputs()) last_read[static_cast<std::size_t>(v)] = none;
  // A value the recomputation reads must exist anyway when it runs: an input, a parameter, a
  // constant, or a value some node still reads at or after that point.
  auto held_at = [&](ValueId v, NodeId at) {
    return g.value(v).kind != ValueKind::op_output || last_read[static_cast<std::size_t>(v)] >= at;
  };
  // The backward value made before node `at` that v's reader (past views of v) waits for last:
  // waiting for it costs the reader nothing. -1 when there is none.
  auto token_for = [&](ValueId v, NodeId at) -> ValueId {
    const Node* reader = &nodes[static_cast<std::size_t>(at)];
    while (is_view(*reader)) {
      const NodeId next = first_backward_read[static_cast<std::size_t>(reader->outputs[0])];
      if (next == none) return -1;
      v = reader->outputs[0];
      reader = &nodes[static_cast<std::size_t>(next)];
    }
    ValueId token = -1;
    for (ValueId u : reader->inputs) {
      if (u == v) continue;
      // Follow views back to a value made before `at`, where the recomputation is placed.
      while (g.value(u).kind == ValueKind::op_output && g.value(u).producer >= at && is_view(g.node(g.value(u).producer)))
        u = g.node(g.value(u).producer).inputs[0];
      const Value& value = g.value(u);
      if (value.kind != ValueKind::op_output || value.producer >= at || !g.node(value.producer).backward) continue;
      if (token < 0 || value.producer > g.value(token).producer) token = u;
    }
    return token;
  };
  std::map<NodeId, std::vector<Plan>> before;  // old node -> what to recompute before it
  for (const Node& n : nodes) {
    if (n.backward || !passes::rewritable(n)) continue;
    if (!recomputable(n)) continue;
    const ValueId v = n.outputs[0];
    const NodeId at = first_backward_read[static_cast<std::size_t>(v)];
    if (at == none || last_read[static_cast<std::size_t>(v)] == none || shape_read[static_cast<std::size_t>(v)] ||
        nodes[static_cast<std::size_t>(at)].region >= 0)
      continue;
    const bool held = std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId r) { return held_at(r, at); });
    const bool waits = std::any_of(n.inputs.begin(), n.inputs.end(),
                                   [&](ValueId r) { return g.value(r).kind == ValueKind::op_output; });
    const ValueId token = token_for(v, at);
    if (held && waits && token >= 0) before[at].push_back(Plan{&n, token});
  }
  passes::Rewriter r(g);
  for (const Node& n : nodes) {
    auto it = before.find(n.id);
    if (it != before.end())
      for (const Plan& p : it->second) {
        // The first computed input waits for the token; the others are read as they are.
        const Node& m = *p.producer;
        std::vector<ValueId> inputs = r.map(m.inputs);
        for (std::size_t i = 0; i < inputs.size(); ++i)
          if (g.value(m.inputs[i]).kind == ValueKind::op_output) {
            inputs[i] = r.emit_before(n, "after", {inputs[i], r.map(p.token)}, {})[0];
            break;
          }
        r.replace(m.outputs[0], r.emit_before(n, m.op, inputs, m.attrs)[0]);
      }
    r.copy(n);
  }
  return r.finish();
}

}  // namespace troupe::graph
