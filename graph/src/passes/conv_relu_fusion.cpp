// Conv-relu fusion (level 3): relu(conv2d(x, w, b)) becomes one conv2d with a relu epilogue
// (attribute relu=1), which oneDNN applies to each result as it stores it: the same bits, without
// the relu's pass over the activations. Like the other fusions it rewrites forward graphs, before
// the gradients are taken (the fused conv's gradient masks dy by its own output), and leaves a conv
// whose output has another reader alone. A custom-gradient relu (custom_relu) fuses only in
// inference graphs, which have no regions left (TracedFunction::for_inference).
#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

bool has_relu_epilogue(const Node& conv) { return conv.attrs.has("relu") && conv.attrs.get_int("relu") != 0; }

// The conv2d feeding relu node `n`, when the pair may fuse; else null.
const Node* fusible_conv(const Graph& g, const Node& n, const std::vector<int>& readers) {
  if (n.op != "relu" || n.backward || !passes::rewritable(n)) return nullptr;
  const Value& y = g.value(n.inputs[0]);
  if (y.kind != ValueKind::op_output || readers[static_cast<std::size_t>(n.inputs[0])] != 1) return nullptr;
  const Node& conv = g.node(y.producer);
  if (conv.op != "conv2d" || conv.backward || !passes::rewritable(conv) || has_relu_epilogue(conv)) return nullptr;
  return &conv;
}

}  // namespace

Graph fuse_conv_relu(const Graph& g) {
  return passes::fuse_pairs(g, fusible_conv, [](passes::Rewriter& r, const Node& relu, const Node& conv) {
    r.emit_for(relu, "conv2d", r.map(conv.inputs), Attrs(conv.attrs).set("relu", std::int64_t{1}));
  });
}

}  // namespace troupe::graph
