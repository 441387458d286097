// Add-layer-norm fusion (level 3): layer_norm(add(a, b)) becomes one add_layer_norm(a, b), which
// forms each row of the sum and normalises it while the row is in cache, and still gives the sum
// (a pre-norm Transformer's residual stream reads it again). Its gradient adds the stream's
// gradient inside the layer norm's backward, so the backward loses an add as well. It runs on
// forward graphs, before the gradients are taken, like the other fusions.
#include <algorithm>

#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// True when `part` is made of the last dims of `full` (the kernel repeats it over the others).
bool is_suffix(const SymShape& part, const SymShape& full) {
  return !part.empty() && part.size() <= full.size() &&
         std::equal(part.begin(), part.end(), full.end() - static_cast<std::ptrdiff_t>(part.size()));
}

// What one matched pair reads: the full-size operand first (add is commutative, bit for bit).
struct Match {
  const Node* add;
  ValueId full, part;
};

// The add feeding layer_norm node `n`, when the pair may fuse: the layer norm is the sum's first
// reader, so the fused node, put where the layer norm was, comes before every other reader.
bool match_at(const Graph& g, const Node& n, const std::vector<NodeId>& first_reader, Match& m) {
  if (n.op != "layer_norm" || n.backward || !passes::rewritable(n)) return false;
  const ValueId x = n.inputs[0];
  const Value& sum = g.value(x);
  if (sum.kind != ValueKind::op_output || first_reader[static_cast<std::size_t>(x)] != n.id) return false;
  const Node& add = g.node(sum.producer);
  if (add.op != "add" || add.backward || !passes::rewritable(add)) return false;
  ValueId full = add.inputs[0], part = add.inputs[1];
  if (g.value(full).info.shape != sum.info.shape) std::swap(full, part);
  const ValueInfo &f = g.value(full).info, &p = g.value(part).info;
  if (f.shape != sum.info.shape || f.dtype != p.dtype || !is_suffix(p.shape, f.shape)) return false;
  m = Match{&add, full, part};
  return true;
}

}  // namespace

Graph fuse_add_layer_norm(const Graph& g) {
  std::vector<NodeId> first_reader(g.values().size(), -1);
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs)
      if (first_reader[static_cast<std::size_t>(v)] < 0) first_reader[static_cast<std::size_t>(v)] = n.id;
  std::vector<Match> match_of(g.nodes().size(), Match{nullptr, -1, -1});  // by layer_norm node
  std::vector<bool> dropped(g.nodes().size(), false);
  for (const Node& n : g.nodes()) {
    Match m{};
    if (!match_at(g, n, first_reader, m)) continue;
    match_of[static_cast<std::size_t>(n.id)] = m;
    dropped[static_cast<std::size_t>(m.add->id)] = true;
  }
  passes::Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (dropped[static_cast<std::size_t>(n.id)]) continue;
    const Match& m = match_of[static_cast<std::size_t>(n.id)];
    if (!m.add) {
      r.copy(n);
      continue;
    }
    std::vector<ValueId> olds{m.add->outputs[0]};
    olds.insert(olds.end(), n.outputs.begin(), n.outputs.end());
    r.emit_standing_for(n, olds, "add_layer_norm", {r.map(m.full), r.map(m.part), r.map(n.inputs[1]), r.map(n.inputs[2])},
                        n.attrs);
  }
  return r.finish();
}

}  // namespace troupe::graph
