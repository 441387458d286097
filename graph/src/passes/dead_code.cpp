// Dead-code elimination: a node stays when a graph output depends on it or it has side effects.
// A custom-gradient region stays or goes as a whole, because its backward is a function of all its
// inputs and outputs; constants nobody reads are not copied (Rewriter).
#include "passes/rewriter.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {
bool has_side_effects(const Node& n) { return OpRegistry::instance().get(n.op).side_effects; }

// Whether region `r` is live once everything after it has been swept: some node in it has side
// effects or an output read by a live node after the region (or by the graph's outputs).
bool region_live(const Graph& g, const CustomRegion& r, const std::vector<bool>& live_value) {
  for (NodeId m = r.first; m <= r.last; ++m) {
    if (has_side_effects(g.node(m))) return true;
    for (ValueId o : g.node(m).outputs)
      if (live_value[static_cast<std::size_t>(o)]) return true;
  }
  return false;
}

// live[n] for every node, swept from the outputs backwards.
std::vector<bool> live_nodes(const Graph& g) {
  std::vector<bool> live_value(g.values().size(), false), live(g.nodes().size(), false);
  for (ValueId v : g.outputs()) live_value[static_cast<std::size_t>(v)] = true;
  for (NodeId n = static_cast<NodeId>(g.nodes().size()) - 1; n >= 0; --n) {
    const Node& node = g.node(n);
    if (node.region >= 0) {
      const CustomRegion& r = g.regions()[static_cast<std::size_t>(node.region)];
      if (n == r.last && region_live(g, r, live_value))
        for (NodeId m = r.first; m <= r.last; ++m) live[static_cast<std::size_t>(m)] = true;
    } else {
      bool l = has_side_effects(node);
      for (ValueId o : node.outputs) l = l || live_value[static_cast<std::size_t>(o)];
      live[static_cast<std::size_t>(n)] = l;
    }
    if (!live[static_cast<std::size_t>(n)]) continue;
    for (ValueId v : node.inputs) live_value[static_cast<std::size_t>(v)] = true;
  }
  return live;
}
}  // namespace

Graph eliminate_dead_code(const Graph& g) {
  const std::vector<bool> live = live_nodes(g);
  passes::Rewriter r(g);
  for (const Node& n : g.nodes())
    if (live[static_cast<std::size_t>(n.id)]) r.copy(n);
  return r.finish();
}

}  // namespace troupe::graph
