// Bias-gelu fusion (level 3): gelu(add(h, b)), with b a bias over h's last dim (a Linear layer's
// bias followed by its activation), becomes one bias_gelu(h, b), which never stores the sum and
// gives the same bits. Like attention fusion it rewrites forward graphs, before the gradients are
// taken, and leaves an add whose sum has another reader (a backward node, an output) alone.
#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// The add feeding gelu node `n`, when the pair may fuse; else null.
const Node* fusible_add(const Graph& g, const Node& n, const std::vector<int>& readers) {
  if (n.op != "gelu" || n.backward || !passes::rewritable(n)) return nullptr;
  const Value& sum = g.value(n.inputs[0]);
  if (sum.kind != ValueKind::op_output || readers[static_cast<std::size_t>(n.inputs[0])] != 1) return nullptr;
  const Node& add = g.node(sum.producer);
  if (add.op != "add" || add.backward || !passes::rewritable(add)) return nullptr;
  const ValueInfo &h = g.value(add.inputs[0]).info, &b = g.value(add.inputs[1]).info;
  if (h.shape.empty() || h.shape != sum.info.shape || b.shape != SymShape{h.shape.back()}) return nullptr;
  return &add;
}

}  // namespace

Graph fuse_bias_gelu(const Graph& g) {
  return passes::fuse_pairs(g, fusible_add, [](passes::Rewriter& r, const Node& gelu, const Node& add) {
    r.emit_for(gelu, "bias_gelu", {r.map(add.inputs[0]), r.map(add.inputs[1])}, {});
  });
}

}  // namespace troupe::graph
