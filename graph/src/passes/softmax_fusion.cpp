// Causal-softmax fusion (level 3): the score chain of an attention layer that attention fusion left
// alone, softmax(causal_mask(mul_scalar(x, s), -inf)), becomes one causal_softmax(x, s), one pass
// over the T x T scores instead of three. Under mixed precision's O2 the chain runs in f32 between
// casts, cast(softmax(causal_mask(cast(mul_scalar(x, s), f32))), low), and the fused node takes
// the low x and writes the low probabilities, widening each row in cache: five passes become one,
// and the backward keeps the bf16 probabilities instead of f32 ones. In f32, or with a power of two
// for s (1/sqrt(64) = 0.125), the forward gives the chain's bits; the backward at O2 reads the
// probabilities rounded to bf16, where the chain's read the f32 ones. Like the other fusions it
// rewrites forward graphs, before the gradients are taken, where the chain's values have no other
// reader.
#include <limits>
#include <map>
#include <optional>

#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// One chain, found at its softmax: what it reads, its scale, the node whose output it gives, and
// the nodes it drops.
struct Chain {
  ValueId x;
  double scale;
  NodeId last;
  std::vector<NodeId> dropped;
};

using passes::sole_producer;

std::optional<Chain> chain_at(const Graph& g, const Node& sm, const std::vector<int>& readers,
                              const std::vector<const Node*>& reader_of) {
  if (sm.op != "softmax" || sm.backward || !passes::rewritable(sm)) return std::nullopt;
  const std::size_t rank = g.value(sm.outputs[0]).info.shape.size();
  const std::int64_t axis = sm.attrs.get_int("axis");
  if (rank < 2 || (axis != -1 && axis != static_cast<std::int64_t>(rank) - 1)) return std::nullopt;
  const Node* mask = sole_producer(g, sm.inputs[0], readers, "causal_mask");
  if (!mask || mask->attrs.get_double("fill") != -std::numeric_limits<double>::infinity()) return std::nullopt;
  const Node* up = sole_producer(g, mask->inputs[0], readers, "cast");  // O2: the scores come up to f32
  const Node* scaled = sole_producer(g, up ? up->inputs[0] : mask->inputs[0], readers, "mul_scalar");
  if (!scaled) return std::nullopt;
  const ValueId x = scaled->inputs[0];
  const DType dtype = g.value(x).info.dtype;
  if (g.value(x).info.shape != g.value(sm.outputs[0]).info.shape) return std::nullopt;
  Chain c{x, scaled->attrs.get_double("value"), sm.id, {scaled->id, mask->id}};
  if (up) {
    c.dropped.push_back(up->id);
    // ... and the probabilities go back down to x's dtype for the product with v.
    const Node* down = readers[static_cast<std::size_t>(sm.outputs[0])] == 1 ? reader_of[static_cast<std::size_t>(sm.outputs[0])] : nullptr;
    if (!down || down->op != "cast" || down->backward || !passes::rewritable(*down) ||
        g.value(down->outputs[0]).info.dtype != dtype)
      return std::nullopt;
    c.dropped.push_back(sm.id);
    c.last = down->id;
  } else if (dtype != g.value(sm.outputs[0]).info.dtype) {
    return std::nullopt;
  }
  return c;
}

}  // namespace

Graph fuse_causal_softmax(const Graph& g) {
  const std::vector<int> readers = passes::reader_counts(g);
  std::vector<const Node*> reader_of(g.values().size(), nullptr);  // a value's last reading node
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) reader_of[static_cast<std::size_t>(v)] = &n;
  std::map<NodeId, Chain> at_last;
  std::vector<bool> dropped(g.nodes().size(), false);
  for (const Node& n : g.nodes())
    if (auto c = chain_at(g, n, readers, reader_of)) {
      for (NodeId d : c->dropped) dropped[static_cast<std::size_t>(d)] = true;
      at_last.emplace(c->last, std::move(*c));
    }
  passes::Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (dropped[static_cast<std::size_t>(n.id)]) continue;
    auto it = at_last.find(n.id);
    if (it == at_last.end()) {
      r.copy(n);
      continue;
    }
    r.emit_for(n, "causal_softmax", {r.map(it->second.x)}, Attrs().set("scale", it->second.scale));
  }
  return r.finish();
}

}  // namespace troupe::graph
