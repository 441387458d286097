// Attention fusion (level 3): the chain the attention layer writes,
//   matmul(softmax(causal_mask(mul_scalar(matmul(q, k, trans_b), s), -inf), -1), v),
// becomes one causal_attention(q, k, v, scale = s) node, which never holds the T x T scores. It
// runs before the gradients are taken (TracedFunction::optimized on a forward graph), so autodiff
// then differentiates the fused op with its own fused backward; in a graph that already has
// backward nodes the chain's values have more readers than the chain and it is left alone. The
// fused kernel rounds differently from the chain (the softmax is online), within 1e-6 relative.
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
  double scale;
  std::vector<NodeId> chain;  // the four nodes before the last, dropped
};

// The node producing `v` when it is an op output read by nobody but its one consumer, else null.
const Node* sole_producer(const Graph& g, ValueId v, const std::vector<int>& readers, const char* op) {
  const Value& value = g.value(v);
  if (value.kind != ValueKind::op_output || readers[static_cast<std::size_t>(v)] != 1) return nullptr;
  const Node& n = g.node(value.producer);
  return n.op == op && passes::rewritable(n) && !n.backward ? &n : nullptr;
}

bool flag(const Attrs& a, const char* name) { return a.has(name) && a.get_int(name) != 0; }

// The chain ending at `last` (a matmul), if it is one.
std::optional<Match> match_at(const Graph& g, const Node& last, const std::vector<int>& readers) {
  if (last.op != "matmul" || last.backward || !passes::rewritable(last) || flag(last.attrs, "trans_a") ||
      flag(last.attrs, "trans_b"))
    return std::nullopt;
  const Node* softmax = sole_producer(g, last.inputs[0], readers, "softmax");
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
  return Match{q, k, v, scale->attrs.get_double("value"), {scores->id, scale->id, mask->id, softmax->id}};
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
    r.emit_for(n, "causal_attention", {r.map(m.q), r.map(m.k), r.map(m.v)}, Attrs().set("scale", m.scale));
  }
  return r.finish();
}

}  // namespace troupe::graph
