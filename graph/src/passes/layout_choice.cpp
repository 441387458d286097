// Layout choice (level 3, inference graphs): f32 and bf16 activations that flow only between
// convolutions and elementwise ops stay channel-blocked ([N, C/16, H, W, 16], oneDNN's nChw16c),
// so oneDNN's direct convolutions read and write them without the reorders an NCHW tensor costs
// at each call (as PyTorch's frozen graphs keep MKL-DNN tensors between convolutions). A value is
// blocked when it is made by a conv2d or by an elementwise op of blocked values of its own shape,
// and every reader takes it blocked: a conv2d (as its input) or such an elementwise op. Graph
// outputs and every other reader (pixel_shuffle, reshape, ...) keep NCHW, so the signature never
// changes. Inference only: a blocked conv has no gradient.
#include <algorithm>

#include "passes/rewriter.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/kernels/conv.hpp"

namespace troupe::graph {

namespace {

bool is_conv(const Node& n) { return n.op == "conv2d" && !n.backward; }

// An elementwise op (in_place kernel op) whose tensor inputs all have its output's shape, so the
// same loop over a blocked layout computes the same elements.
bool is_layout_free(const Graph& g, const Node& n) {
  const OpDef& def = OpRegistry::instance().get(n.op);
  if (n.backward || n.outputs.size() != 1 || !def.in_place || def.in_place_input >= 0) return false;
  const SymShape& shape = g.value(n.outputs[0]).info.shape;
  return std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) { return g.value(v).info.shape == shape; });
}

// The dtypes oneDNN's convolutions take channel-blocked.
bool blockable_dtype(DType d) { return d == DType::f32 || d == DType::bf16; }

// NCHW f32 or bf16 with a fixed channel count divisible by the block.
bool blockable(const ValueInfo& info) {
  return blockable_dtype(info.dtype) && info.shape.size() == 4 && info.shape[1].is_static() &&
         info.shape[1].size() % kernels::kChannelBlock == 0;
}

// The values to keep blocked: grown from conv outputs through layout-free ops, then pruned of
// values some reader needs in NCHW, until nothing changes.
std::vector<bool> blocked_values(const Graph& g) {
  std::vector<bool> blocked(g.values().size(), false);
  for (const Node& n : g.nodes()) {
    const ValueId out = n.outputs.empty() ? -1 : n.outputs[0];
    if (out < 0 || !blockable(g.value(out).info)) continue;
    if (is_conv(n) && blockable_dtype(g.value(n.inputs[1]).info.dtype)) blocked[static_cast<std::size_t>(out)] = true;
    if (is_layout_free(g, n) && std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) {
          return blocked[static_cast<std::size_t>(v)];
        }))
      blocked[static_cast<std::size_t>(out)] = true;
  }
  for (bool changed = true; changed;) {
    changed = false;
    auto unblock = [&](ValueId v) {
      if (!blocked[static_cast<std::size_t>(v)]) return;
      blocked[static_cast<std::size_t>(v)] = false;
      changed = true;
    };
    for (ValueId v : g.outputs()) unblock(v);
    for (const Node& n : g.nodes()) {
      const bool free = is_layout_free(g, n);
      const bool out_blocked = free && blocked[static_cast<std::size_t>(n.outputs[0])];
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        const ValueId v = n.inputs[i];
        const bool takes_blocked = (is_conv(n) && i == 0) || out_blocked;
        if (!takes_blocked) unblock(v);
      }
      // An elementwise op whose inputs are not all blocked computes in NCHW.
      if (free && out_blocked && std::any_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) {
            return !blocked[static_cast<std::size_t>(v)];
          }))
        unblock(n.outputs[0]);
    }
  }
  return blocked;
}

}  // namespace

Graph choose_layouts(const Graph& g) {
  const std::vector<bool> blocked = blocked_values(g);
  auto is_blocked = [&](ValueId v) { return blocked[static_cast<std::size_t>(v)]; };
  passes::Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (is_conv(n) && (is_blocked(n.inputs[0]) || is_blocked(n.outputs[0]))) {
      Attrs attrs = n.attrs;
      attrs.set("blocked_input", std::int64_t{is_blocked(n.inputs[0])});
      attrs.set("blocked_output", std::int64_t{is_blocked(n.outputs[0])});
      if (is_blocked(n.outputs[0]))
        r.emit_relaid_for(n, n.op, r.map(n.inputs), attrs);
      else
        r.emit_for(n, n.op, r.map(n.inputs), attrs, n.target);
    } else if (!n.outputs.empty() && is_blocked(n.outputs[0])) {
      r.emit_relaid_for(n, n.op, r.map(n.inputs), n.attrs);
    } else {
      r.copy(n);
    }
  }
  return r.finish();
}

}  // namespace troupe::graph
