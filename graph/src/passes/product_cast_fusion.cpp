// Product-cast fusion (level 3, mixed precision): cast(p, f32), p a bf16 or f16 matmul or
// matmul_bias written in its operands' dtype and read by nobody but the cast, becomes the product
// written as f32 from its f32 accumulator. Mixed precision makes this pair wherever a product feeds
// an op that keeps f32: a Linear layer before the residual add and layer norm, the logits before the
// loss, and in the backward every weight gradient (the parameters' gradients are f32) and the
// gradients reaching a layer norm or a softmax. The fused product skips the pass over its output and
// the rounding to bf16 in between, so it is closer to the f32 result, not the same bits. A
// matmul_bias's bias goes up with the result; when it is the cast of an f32 value that nobody else
// reads (a bias parameter under O2), the product reads that value and the cast goes. Forward and
// backward nodes alike: the fused forward product's gradient is matmul's rule for an f32 result.
#include <optional>

#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {

// One cast to fold: the product it absorbs and, for matmul_bias, the bias's cast from f32 to drop.
struct Fold {
  const Node* product = nullptr;
  const Node* bias_cast = nullptr;
};

// The producer of `v`, forward or backward, when v is an op output read only by its one consumer,
// else null (passes::sole_producer takes forward nodes only; this pass folds backward ones too).
const Node* read_once_producer(const Graph& g, ValueId v, const std::vector<int>& readers) {
  const Value& value = g.value(v);
  if (value.kind != ValueKind::op_output || readers[static_cast<std::size_t>(v)] != 1) return nullptr;
  return &g.node(value.producer);
}

// The fold of cast node `n`, if it is one.
std::optional<Fold> fold_at(const Graph& g, const Node& n, const std::vector<int>& readers) {
  if (n.op != "cast" || !passes::rewritable(n) || g.value(n.outputs[0]).info.dtype != DType::f32) return std::nullopt;
  const Node* p = read_once_producer(g, n.inputs[0], readers);
  if (!p || (p->op != "matmul" && p->op != "matmul_bias") || p->backward != n.backward || !passes::rewritable(*p))
    return std::nullopt;
  const DType written = g.value(p->outputs[0]).info.dtype;
  if (!is_low_precision(written) || g.value(p->inputs[0]).info.dtype != written) return std::nullopt;
  Fold fold{p, nullptr};
  if (p->op == "matmul_bias") {
    const Node* c = read_once_producer(g, p->inputs[2], readers);
    if (!c || c->op != "cast" || !passes::rewritable(*c) || g.value(c->inputs[0]).info.dtype != DType::f32)
      return std::nullopt;  // a bias made low some other way: left as it is
    fold.bias_cast = c;
  }
  return fold;
}

}  // namespace

Graph fuse_product_casts(const Graph& g) {
  const std::vector<int> readers = passes::reader_counts(g);
  std::vector<std::optional<Fold>> folds(g.nodes().size());
  std::vector<bool> dropped(g.nodes().size(), false);
  for (const Node& n : g.nodes())
    if ((folds[static_cast<std::size_t>(n.id)] = fold_at(g, n, readers))) {
      const Fold& f = *folds[static_cast<std::size_t>(n.id)];
      dropped[static_cast<std::size_t>(f.product->id)] = true;
      if (f.bias_cast) dropped[static_cast<std::size_t>(f.bias_cast->id)] = true;
    }
  passes::Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (dropped[static_cast<std::size_t>(n.id)]) continue;
    const std::optional<Fold>& f = folds[static_cast<std::size_t>(n.id)];
    if (!f) {
      r.copy(n);
      continue;
    }
    const Node& p = *f->product;
    std::vector<ValueId> inputs{r.map(p.inputs[0]), r.map(p.inputs[1])};
    if (f->bias_cast) inputs.push_back(r.map(f->bias_cast->inputs[0]));
    Attrs attrs = p.attrs;
    attrs.set("out_dtype", static_cast<std::int64_t>(DType::f32));
    r.emit_for(n, p.op, inputs, attrs, p.target);
  }
  return r.finish();
}

}  // namespace troupe::graph
