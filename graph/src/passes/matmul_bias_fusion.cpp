// Matmul-bias fusion (level 3): add(matmul(a, w), b), with b a bias over the product's last dim (a
// Linear layer), becomes one matmul_bias(a, w, b): the GEMM accumulates onto the bias, so the sum
// is not a second pass over the output. Like bias-gelu fusion it rewrites forward graphs, before
// the gradients are taken, runs after it (a Linear layer followed by gelu keeps its bias_gelu), and
// leaves a product with another reader alone. In bf16 and f16 (mixed precision's O2) the bias is
// added to the f32 accumulator before the one rounding, where the unfused pair rounds twice.
#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// The matmul feeding add node `n` as its first operand, when the pair may fuse; else null.
const Node* fusible_matmul(const Graph& g, const Node& n, const std::vector<int>& readers) {
  if (n.op != "add" || n.backward || !passes::rewritable(n)) return nullptr;
  const Value& product = g.value(n.inputs[0]);
  if (product.kind != ValueKind::op_output || readers[static_cast<std::size_t>(n.inputs[0])] != 1) return nullptr;
  const Node& mm = g.node(product.producer);
  if (mm.op != "matmul" || mm.backward || !passes::rewritable(mm)) return nullptr;
  const ValueInfo &y = product.info, &b = g.value(n.inputs[1]).info, &sum = g.value(n.outputs[0]).info;
  if (sum.shape != y.shape || b.dtype != y.dtype || b.shape != SymShape{y.shape.back()}) return nullptr;
  return &mm;
}

}  // namespace

Graph fuse_matmul_bias(const Graph& g) {
  return passes::fuse_pairs(g, fusible_matmul, [](passes::Rewriter& r, const Node& add, const Node& mm) {
    r.emit_for(add, "matmul_bias", {r.map(mm.inputs[0]), r.map(mm.inputs[1]), r.map(add.inputs[1])}, mm.attrs);
  });
}

}  // namespace troupe::graph
