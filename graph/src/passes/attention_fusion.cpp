// Attention fusion (level 3): the chain the attention layer writes,
//   matmul(softmax(causal_mask(mul_scalar(matmul(q, k, trans_b), s), -inf), -1), v),
// becomes one causal_attention(q, k, v, scale = s) node, which never holds the T x T scores. It
// runs before the gradients are taken (TracedFunction::optimized on a forward graph), so autodiff
// then differentiates the fused op with its own fused backward; in a graph that already has
// backward nodes the chain's values have more readers than the chain and it is left alone. The
// fused kernel rounds differently from the chain (the softmax is online), within 1e-6 relative.
// Dropout on the probabilities, matmul(mul(p, dropout_mask(p)), v), fuses too: the kernel draws
// the mask's decisions itself (the node keeps its site, probability and shard).
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// What one matched chain reads, found at its last node.
struct Match {
  ValueId q, k, v;
  Attrs attrs;                // the fused node's: the scale, and the dropout's
  std::vector<NodeId> chain;  // the nodes before the last, dropped
};

using passes::sole_producer;

bool flag(const Attrs& a, const char* name) { return a.has(name) && a.get_int(name) != 0; }

// The chain ending at `last` (a matmul), if it is one.
std::optional<Match> match_at(const Graph& g, const Node& last, const std::vector<int>& readers) {
  if (last.op != "matmul" || last.backward || !passes::rewritable(last) || flag(last.attrs, "trans_a") ||
      flag(last.attrs, "trans_b"))
    return std::nullopt;
  // With dropout: mul(p, dropout_mask(p)) between the softmax and the product, p read by both.
  const Node* drop = nullptr;
  ValueId probs = last.inputs[0];
  if (const Node* dropped = sole_producer(g, probs, readers, "mul"))
    for (std::size_t side = 0; side < 2 && !drop; ++side) {
      const Node* mask = sole_producer(g, dropped->inputs[side], readers, "dropout_mask");
      if (mask && mask->inputs[0] == dropped->inputs[1 - side]) {
        drop = mask;
        probs = mask->inputs[0];
      }
    }
  const Node* softmax = sole_producer(g, probs, readers, "softmax", drop ? 2 : 1);
  if (!softmax) return std::nullopt;
  const std::int64_t rank = static_cast<std::int64_t>(g.value(softmax->outputs[0]).info.shape.size());
  const std::int64_t axis = softmax->attrs.get_int("axis");
  if (axis != -1 && axis != rank - 1) return std::nullopt;
  const Node* mask = sole_producer(g, softmax->inputs[0], readers, "causal_mask");
  if (!mask || mask->attrs.get_double("fill") != -std::numeric_limits<double>::infinity()) return std::nullopt;
  const Node* scale = sole_producer(g, mask->inputs[0], readers, "mul_scalar");
  if (!scale) return std::nullopt;
  const Node* scores = sole_producer(g, scale->inputs[0], readers, "matmul");
  if (!scores || flag(scores->attrs, "trans_a") || !flag(scores->attrs, "trans_b")) return std::nullopt;
  const ValueId q = scores->inputs[0], k = scores->inputs[1], v = last.inputs[1];
  const ValueInfo &iq = g.value(q).info, &ik = g.value(k).info, &iv = g.value(v).info;
  if (iq.shape.size() < 2 || iq.dtype != ik.dtype || iq.dtype != iv.dtype || iq.shape != ik.shape || iq.shape != iv.shape)
    return std::nullopt;  // the fused kernel takes q, k, v of one shape (no broadcasting, no cross attention)
  Match m{q, k, v, Attrs().set("scale", scale->attrs.get_double("value")), {scores->id, scale->id, mask->id, softmax->id}};
  if (drop) {
    m.attrs.set("dropout", drop->attrs.get_double("p")).set("site", drop->attrs.get_int("site")).set("shard", drop->attrs.get_ints("shard"));
    m.chain.push_back(drop->id);
    m.chain.push_back(g.value(last.inputs[0]).producer);
  }
  return m;
}

}  // namespace

Graph fuse_attention(const Graph& g) {
  const std::vector<int> readers = passes::reader_counts(g);
  std::map<NodeId, Match> fused;
  std::vector<bool> dropped(g.nodes().size(), false);
  for (const Node& n : g.nodes())
    if (auto m = match_at(g, n, readers)) {
      for (NodeId c : m->chain) dropped[static_cast<std::size_t>(c)] = true;
      fused.emplace(n.id, std::move(*m));
    }
  passes::Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (dropped[static_cast<std::size_t>(n.id)]) continue;
    auto it = fused.find(n.id);
    if (it == fused.end()) {
      r.copy(n);
      continue;
    }
    const Match& m = it->second;
    r.emit_for(n, "causal_attention", {r.map(m.q), r.map(m.k), r.map(m.v)}, m.attrs);
  }
  return r.finish();
}

}  // namespace troupe::graph
