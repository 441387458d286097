// Constant folding: a node whose inputs are all constants is run once, now, by the same OpDef::run
// the executor would call, and its outputs become constants; chains fold in one sweep because the
// folded outputs are constants by the time their consumers are reached. zeros_like reads only its
// input's shape and dtype, so it folds whenever that shape is fixed (the seed of a traced backward
// is zeros_like(loss) + 1). Results are kept exactly as the op returns them (views stay views), so
// consumers see the same strides as before.
#include <algorithm>

#include "passes/rewriter.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {
// The input tensors node `n` would read, or an empty vector when one of them is not known now.
std::vector<Tensor> constant_inputs(const Graph& out, const Node& n, const std::vector<ValueId>& inputs) {
  std::vector<Tensor> tensors;
  for (ValueId v : inputs) {
    const Value& value = out.value(v);
    if (value.kind == ValueKind::constant) {
      tensors.push_back(value.constant);
    } else if (n.op == "zeros_like" && is_static(value.info.shape)) {
      tensors.push_back(Tensor::empty(to_static(value.info.shape, "zeros_like"), value.info.dtype));
    } else {
      return {};
    }
  }
  return tensors;
}

// Folds `n` into constants when it can; false leaves it to be copied.
bool fold(passes::Rewriter& r, const Graph& g, const Node& n) {
  if (!passes::rewritable(n) || n.inputs.empty()) return false;
  const std::vector<ValueId> inputs = r.map(n.inputs);
  const std::vector<Tensor> tensors = constant_inputs(r.result(), n, inputs);
  if (tensors.empty()) return false;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (ValueId o : n.outputs) {
    const ValueInfo& info = g.value(o).info;
    if (!is_static(info.shape)) return false;
    // A graph output stays an op output, so callers never receive the graph's own constant.
    if (std::find(g.outputs().begin(), g.outputs().end(), o) != g.outputs().end()) return false;
    shapes.push_back(to_static(info.shape, n.op));
    dtypes.push_back(info.dtype);
  }
  const OpDef& def = OpRegistry::instance().get(n.op);
  const std::vector<Tensor> results = def.run(tensors, ComputeContext{n.attrs, shapes, dtypes, n.label});
  for (std::size_t i = 0; i < results.size(); ++i) r.replace(n.outputs[i], r.constant(results[i]));
  return true;
}
}  // namespace

Graph fold_constants(const Graph& g) {
  passes::Rewriter r(g);
  for (const Node& n : g.nodes())
    if (!fold(r, g, n)) r.copy(n);
  return r.finish();
}

}  // namespace troupe::graph
