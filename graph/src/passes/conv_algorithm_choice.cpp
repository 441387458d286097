// Convolution algorithm choice (level 3, inference graphs): 3x3 stride-1 f32 convolutions ask for
// Winograd F(2x2, 3x3), which oneDNN computes with 2.25x fewer multiplications than the direct
// convolution (the kernel falls back to direct where oneDNN has no Winograd for the shape or CPU).
// Winograd rounds differently, about 1e-6 of the output's scale (tested), and has no gradient
// implementation in oneDNN, so training graphs keep the direct convolution.
#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

bool wants_winograd(const Graph& g, const Node& n) {
  if (n.op != "conv2d" || n.backward || n.attrs.get_int("stride") != 1) return false;
  const ValueInfo& w = g.value(n.inputs[1]).info;
  return w.dtype == DType::f32 && w.shape.size() == 4 && w.shape[2] == SymDim(3) && w.shape[3] == SymDim(3);
}

}  // namespace

Graph choose_conv_algorithms(const Graph& g) {
  passes::Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (wants_winograd(g, n))
      r.emit_for(n, n.op, r.map(n.inputs), Attrs(n.attrs).set("winograd", std::int64_t{1}), n.target);
    else
      r.copy(n);
  }
  return r.finish();
}

}  // namespace troupe::graph
