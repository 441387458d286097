// Algebraic simplification: nodes that give their input back bit for bit are dropped, and chains
// of permutes or reshapes become one node. Every rule keeps what consumers read identical, strides
// included (a consumer's kernel may take another path for another layout):
// - x*1, x/1, x+(-0), x-(+0), as scalar ops or with a constant of ones or zeros: IEEE arithmetic
//   gives x exactly (x+(+0) does not: it turns -0 into +0, so it stays). Only when x already has
//   the result's dtype and shape (no broadcasting) and is known dense, as the result would be;
// - permute of permute composes to one permute, with exactly the strides of the two; a permute
//   to the identity order is its input;
// - reshape of reshape of a dense value is one reshape, and a reshape of a dense value to its own
//   shape is the value (a reshape of a dense tensor is a dense view).
#include <cmath>

#include "passes/rewriter.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {
// True when constant `v` of `g` holds only elements equal to `value` with its sign.
bool constant_all(const Graph& g, ValueId v, double value) {
  const Value& c = g.value(v);
  if (c.kind != ValueKind::constant || !is_floating(c.info.dtype)) return false;
  const Tensor d = c.constant.to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = d.data<double>();
  for (std::int64_t i = 0; i < d.numel(); ++i)
    if (p[i] != value || std::signbit(p[i]) != std::signbit(value)) return false;
  return true;
}

// The operand of a binary node that is its result when the other one is the constant `unit`
// (`either`: the unit may be on either side), or -1.
ValueId binary_identity(const Graph& out, const std::vector<ValueId>& in, double unit, bool either) {
  if (constant_all(out, in[1], unit)) return in[0];
  if (either && constant_all(out, in[0], unit)) return in[1];
  return -1;
}

// The value node `n` (inputs mapped to `in`) merely passes on, or -1.
ValueId passed_through(const Graph& out, const Node& n, const std::vector<ValueId>& in) {
  ValueId x = -1;
  if (n.op == "mul_scalar" && n.attrs.get_double("value") == 1.0) x = in[0];
  if (n.op == "add_scalar" && n.attrs.get_double("value") == 0.0 && std::signbit(n.attrs.get_double("value")))
    x = in[0];
  if (n.op == "mul") x = binary_identity(out, in, 1.0, true);
  if (n.op == "div") x = binary_identity(out, in, 1.0, false);
  if (n.op == "add") x = binary_identity(out, in, -0.0, true);
  if (n.op == "sub") x = binary_identity(out, in, 0.0, false);
  if (n.op == "reshape") x = in[0];  // to its own shape: the info check below decides
  if (x < 0 || !passes::known_dense(out, x)) return -1;
  return x;
}

std::vector<std::int64_t> normalized(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> d = dims;
  for (auto& a : d)
    if (a < 0) a += static_cast<std::int64_t>(d.size());
  return d;
}

bool is_identity(const std::vector<std::int64_t>& dims) {
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<std::int64_t>(i)) return false;
  return true;
}

// The rewritable node of `out` producing `v` with op `op`, or null.
const Node* producer_of(const Graph& out, ValueId v, const char* op) {
  const Value& value = out.value(v);
  if (value.kind != ValueKind::op_output) return nullptr;
  const Node& p = out.node(value.producer);
  return p.op == op && passes::rewritable(p) ? &p : nullptr;
}

// permute(permute(x, p1), p2) = permute(x, p1[p2[i]]); the identity order gives x.
bool simplify_permute(passes::Rewriter& r, const Node& n, const std::vector<ValueId>& in) {
  std::vector<std::int64_t> dims = normalized(n.attrs.get_ints("dims"));
  ValueId x = in[0];
  if (const Node* inner = producer_of(r.result(), x, "permute")) {
    const std::vector<std::int64_t> first = normalized(inner->attrs.get_ints("dims"));
    for (auto& d : dims) d = first[static_cast<std::size_t>(d)];
    x = inner->inputs[0];
  } else if (!is_identity(dims)) {
    return false;
  }
  if (!is_identity(dims)) {
    r.emit_for(n, "permute", {x}, Attrs().set("dims", dims));
    return true;
  }
  if (!r.can_replace(n.outputs[0], x)) return false;
  r.replace(n.outputs[0], x);
  return true;
}

// reshape(reshape(x, s1), s2) = reshape(x, s2) when x is dense.
bool simplify_reshape_chain(passes::Rewriter& r, const Graph& g, const Node& n, const std::vector<ValueId>& in) {
  const Node* inner = producer_of(r.result(), in[0], "reshape");
  if (!inner || !passes::known_dense(r.result(), inner->inputs[0])) return false;
  const ValueId x = inner->inputs[0];
  if (r.can_replace(n.outputs[0], x)) {
    r.replace(n.outputs[0], x);  // back to x's own shape
    return true;
  }
  r.emit_for(n, "reshape", {x}, {}, g.value(n.outputs[0]).info.shape);
  return true;
}

// Applies the first rule that fits node `n`; false leaves it to be copied.
bool simplify(passes::Rewriter& r, const Graph& g, const Node& n) {
  if (!passes::rewritable(n)) return false;
  const std::vector<ValueId> in = r.map(n.inputs);
  const ValueId x = passed_through(r.result(), n, in);
  if (x >= 0 && r.can_replace(n.outputs[0], x)) {
    r.replace(n.outputs[0], x);
    return true;
  }
  if (n.op == "permute") return simplify_permute(r, n, in);
  if (n.op == "reshape") return simplify_reshape_chain(r, g, n, in);
  return false;
}
}  // namespace

Graph simplify_algebra(const Graph& g) {
  passes::Rewriter r(g);
  for (const Node& n : g.nodes())
    if (!simplify(r, g, n)) r.copy(n);
  return r.finish();
}

}  // namespace troupe::graph
