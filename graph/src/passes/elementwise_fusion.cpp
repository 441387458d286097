// Elementwise fusion (level 3): a tree of elementwise nodes whose intermediate values nobody else
// reads becomes one elementwise_chain node, which runs the steps tile by tile in one pass and
// never stores the intermediates (kernels/elementwise_chain.hpp). It runs after the named fusions
// (bias-gelu, conv-relu, ...), which make better kernels of their patterns, on forward graphs
// (the chain's gradient recomputes what the backward needs) and again on differentiated ones,
// where backward chains (a derivative times a gradient, plus a second gradient) fuse the same way.
#include <algorithm>
#include <map>

#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/kernels/elementwise_chain.hpp"

namespace troupe::graph {

namespace {

// True when node `n` can be a step: an op a chain runs, on floating inputs of its output's dtype.
bool chainable(const Graph& g, const Node& n) {
  if (!passes::rewritable(n) || n.outputs.size() != 1 || !kernels::chain_op(n.op)) return false;
  const DType t = g.value(n.outputs[0]).info.dtype;
  if (t != DType::f32 && t != DType::f64) return false;
  return std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) { return g.value(v).info.dtype == t; });
}

// A group of nodes becoming one chain: its members in node order (the last is the root, whose
// value the chain gives) and its external inputs in order of first use.
struct Group {
  std::vector<NodeId> members;
  std::vector<ValueId> inputs;
};

// The inputs of `members` that none of them produces, in order of first use.
std::vector<ValueId> external_inputs(const Graph& g, const std::vector<NodeId>& members) {
  std::vector<ValueId> out;
  for (NodeId m : members)
    for (ValueId v : g.node(m).inputs) {
      const Value& value = g.value(v);
      const bool inside = value.kind == ValueKind::op_output &&
                          std::binary_search(members.begin(), members.end(), value.producer);
      if (!inside && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
  return out;
}

// The chain's steps: member j is step j; an operand is an external input or an earlier step.
std::vector<kernels::ChainStep> steps_of(const Graph& g, const Group& group) {
  std::vector<kernels::ChainStep> steps;
  const int n = static_cast<int>(group.inputs.size());
  auto operand = [&](ValueId v) {
    const Value& value = g.value(v);
    if (value.kind == ValueKind::op_output) {
      auto it = std::find(group.members.begin(), group.members.end(), value.producer);
      if (it != group.members.end()) return n + static_cast<int>(it - group.members.begin());
    }
    return static_cast<int>(std::find(group.inputs.begin(), group.inputs.end(), v) - group.inputs.begin());
  };
  for (NodeId m : group.members) {
    const Node& node = g.node(m);
    const kernels::ChainOp op = *kernels::chain_op(node.op);
    double value = 0.0;
    if (op == kernels::ChainOp::relu_backward) value = node.attrs.get_double("negative_slope");
    else if (kernels::chain_op_has_value(op)) value = node.attrs.get_double("value");
    steps.push_back({op, operand(node.inputs[0]), node.inputs.size() > 1 ? operand(node.inputs[1]) : -1, value});
  }
  return steps;
}

}  // namespace

Graph fuse_elementwise_chains(const Graph& g) {
  const std::vector<int> readers = passes::reader_counts(g);
  std::vector<int> group_of(g.nodes().size(), -1);
  std::vector<Group> groups;
  for (const Node& n : g.nodes()) {
    if (!chainable(g, n)) continue;
    Group cur{{n.id}, external_inputs(g, {n.id})};
    std::vector<int> absorbed;
    for (ValueId v : n.inputs) {
      const Value& value = g.value(v);
      if (value.kind != ValueKind::op_output) continue;
      const int gp = group_of[static_cast<std::size_t>(value.producer)];
      if (gp < 0 || std::find(absorbed.begin(), absorbed.end(), gp) != absorbed.end()) continue;
      // The producer's value must be read by n alone (n may read it twice) and have n's shape, so
      // the chain computes each step once per output element.
      const auto uses = std::count(n.inputs.begin(), n.inputs.end(), v);
      if (readers[static_cast<std::size_t>(v)] != uses || value.info.shape != g.value(n.outputs[0]).info.shape) continue;
      Group merged;
      std::merge(groups[static_cast<std::size_t>(gp)].members.begin(), groups[static_cast<std::size_t>(gp)].members.end(),
                 cur.members.begin(), cur.members.end(), std::back_inserter(merged.members));
      merged.inputs = external_inputs(g, merged.members);
      if (merged.inputs.size() > kernels::kMaxChainInputs || merged.members.size() > kernels::kMaxChainSteps) continue;
      cur = std::move(merged);
      absorbed.push_back(gp);
    }
    for (int gp : absorbed) groups[static_cast<std::size_t>(gp)].members.clear();
    for (NodeId m : cur.members) group_of[static_cast<std::size_t>(m)] = static_cast<int>(groups.size());
    groups.push_back(std::move(cur));
  }
  std::map<NodeId, const Group*> chain_at;  // root -> its group, for groups of two nodes or more
  std::vector<bool> dropped(g.nodes().size(), false);
  for (const Group& group : groups) {
    if (group.members.size() < 2) continue;
    chain_at[group.members.back()] = &group;
    for (std::size_t k = 0; k + 1 < group.members.size(); ++k) dropped[static_cast<std::size_t>(group.members[k])] = true;
  }
  passes::Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (dropped[static_cast<std::size_t>(n.id)]) continue;
    auto it = chain_at.find(n.id);
    if (it == chain_at.end()) {
      r.copy(n);
      continue;
    }
    const Group& group = *it->second;
    r.emit_for(n, "elementwise_chain", r.map(group.inputs), kernels::chain_attrs(steps_of(g, group)));
  }
  return r.finish();
}

}  // namespace troupe::graph
