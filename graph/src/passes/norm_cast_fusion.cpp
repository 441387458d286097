// Norm-cast fusion (level 3, mixed precision): cast(y, low), y the normalised output of an f32
// layer_norm or add_layer_norm read by nothing but the cast, becomes the norm writing y as low
// (attribute y_dtype): under O2 every layer norm feeds a product through such a cast, and the
// norm's kernel, which computes each row in f32 in cache, rounds it on the way out instead of a
// second pass over the tensor. The same bits: the cast rounds the same f32 values to nearest even.
// In a forward graph, before the gradients are taken, whose rule then casts y's low gradient up
// for the backward, as the cast's rule did.
#include <map>

#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// Which output of a norm node is y: layer_norm's first, add_layer_norm's second.
int y_output(const Node& n) {
  if (n.op == "layer_norm") return 0;
  if (n.op == "add_layer_norm") return 1;
  return -1;
}

// The norm whose y cast node `n` rounds, when the pair may fuse; else null.
const Node* fusible_norm(const Graph& g, const Node& n, const std::vector<int>& readers) {
  if (n.op != "cast" || n.backward || !passes::rewritable(n)) return nullptr;
  const Value& y = g.value(n.inputs[0]);
  if (y.kind != ValueKind::op_output || readers[static_cast<std::size_t>(n.inputs[0])] != 1) return nullptr;
  const Node& norm = g.node(y.producer);
  const int at = y_output(norm);
  if (at < 0 || norm.outputs[static_cast<std::size_t>(at)] != n.inputs[0] || norm.backward || !passes::rewritable(norm))
    return nullptr;
  const DType to = g.value(n.outputs[0]).info.dtype;
  return y.info.dtype == DType::f32 && is_low_precision(to) ? &norm : nullptr;
}

}  // namespace

Graph fuse_norm_casts(const Graph& g) {
  const std::vector<int> readers = passes::reader_counts(g);
  std::map<NodeId, const Node*> cast_of;  // norm -> the cast it absorbs
  std::vector<bool> absorbed(g.nodes().size(), false);
  for (const Node& n : g.nodes())
    if (const Node* norm = fusible_norm(g, n, readers)) {
      cast_of.emplace(norm->id, &n);
      absorbed[static_cast<std::size_t>(n.id)] = true;
    }
  passes::Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (absorbed[static_cast<std::size_t>(n.id)]) continue;
    auto it = cast_of.find(n.id);
    if (it == cast_of.end()) {
      r.copy(n);
      continue;
    }
    // The norm in its place, y standing for the cast's value; its other outputs for its own.
    const Node& cast = *it->second;
    std::vector<ValueId> olds = n.outputs;
    olds[static_cast<std::size_t>(y_output(n))] = cast.outputs[0];
    Attrs attrs = n.attrs;
    attrs.set("y_dtype", cast.attrs.get_int("dtype"));
    r.emit_standing_for(n, olds, n.op, r.map(n.inputs), attrs, n.target);
  }
  return r.finish();
}

}  // namespace troupe::graph
