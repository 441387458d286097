// Conv-residual fusion (level 3, inference graphs): add(r, conv2d(x, w, b)) becomes one
// conv2d_residual(r, x, w, b), whose kernel adds the convolution to r through oneDNN's sum
// post-op, and whose output the executor writes over r when r dies there (a residual block's
// skip). The add's pass over the activations goes. It runs after layout choice, so r, the conv
// and the add already agree on a layout, and only where the conv has no relu epilogue (the sum
// would come before the relu) and its output has no other reader. No gradient: training graphs
// keep the add.
#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// The conv2d feeding add node `n` whose result the fused op can add to the add's other input.
const Node* fusible_conv(const Graph& g, const Node& n, const std::vector<int>& readers) {
  if (n.op != "add" || n.backward || !passes::rewritable(n) || n.inputs.size() != 2) return nullptr;
  const ValueInfo& out = g.value(n.outputs[0]).info;
  for (ValueId v : n.inputs)
    if (g.value(v).info.shape != out.shape || g.value(v).info.dtype != out.dtype) return nullptr;
  for (ValueId v : n.inputs) {
    const Value& y = g.value(v);
    if (y.kind != ValueKind::op_output || readers[static_cast<std::size_t>(v)] != 1) continue;
    const Node& conv = g.node(y.producer);
    const bool relu = conv.attrs.has("relu") && conv.attrs.get_int("relu") != 0;
    if (conv.op == "conv2d" && !conv.backward && passes::rewritable(conv) && !relu) return &conv;
  }
  return nullptr;
}

}  // namespace

Graph fuse_conv_residual(const Graph& g) {
  return passes::fuse_pairs(g, fusible_conv, [](passes::Rewriter& r, const Node& add, const Node& conv) {
    const ValueId residual = add.inputs[0] == conv.outputs[0] ? add.inputs[1] : add.inputs[0];
    std::vector<ValueId> inputs{r.map(residual)};
    for (ValueId v : conv.inputs) inputs.push_back(r.map(v));
    r.emit_for(add, "conv2d_residual", inputs, conv.attrs);
  });
}

}  // namespace troupe::graph
