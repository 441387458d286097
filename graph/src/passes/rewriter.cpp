#include "passes/rewriter.hpp"

#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph::passes {

Rewriter::Rewriter(const Graph& src)
    : src_(src), map_(src.values().size(), -1), is_output_(src.values().size(), false) {
  for (ValueId v : src.inputs()) map_[static_cast<std::size_t>(v)] = out_.add_input(src.value(v).name, src.value(v).info);
  for (ValueId v : src.parameters())
    map_[static_cast<std::size_t>(v)] = out_.add_parameter(src.value(v).name, src.value(v).info);
  for (ValueId v : src.outputs()) is_output_[static_cast<std::size_t>(v)] = true;
}

ValueId Rewriter::map(ValueId v) {
  ValueId& m = map_.at(static_cast<std::size_t>(v));
  if (m < 0 && src_.value(v).kind == ValueKind::constant) m = out_.add_constant(src_.value(v).constant);
  TROUPE_CHECK(m >= 0, runtime, "graph pass: value %", v, " is read before its producer was copied (a pass bug)");
  return m;
}

std::vector<ValueId> Rewriter::map(const std::vector<ValueId>& vs) {
  std::vector<ValueId> out;
  out.reserve(vs.size());
  for (ValueId v : vs) out.push_back(map(v));
  return out;
}

void Rewriter::enter_region(int old_region) {
  if (old_region == open_old_) return;
  if (open_new_ >= 0) {
    const CustomRegion& r = src_.regions()[static_cast<std::size_t>(open_old_)];
    out_.end_region(open_new_, map(r.outputs), r.backward);
  }
  open_old_ = old_region;
  open_new_ = -1;
  if (old_region < 0) return;
  const CustomRegion& r = src_.regions()[static_cast<std::size_t>(old_region)];
  open_new_ = out_.begin_region(r.name, map(r.inputs));
}

void Rewriter::claim(ValueId old_value, ValueId new_value) {
  if (!is_output_[static_cast<std::size_t>(old_value)]) return;
  if (claimed_.size() < out_.values().size()) claimed_.resize(out_.values().size(), false);
  claimed_[static_cast<std::size_t>(new_value)] = true;
}

NodeId Rewriter::copy(const Node& n) { return emit_for(n, n.op, map(n.inputs), n.attrs, n.target); }

NodeId Rewriter::emit_for(const Node& n, const std::string& op, const std::vector<ValueId>& inputs,
                          const Attrs& attrs, const SymShape& target) {
  return emit_standing_for(n, n.outputs, op, inputs, attrs, target);
}

NodeId Rewriter::emit_standing_for(const Node& n, const std::vector<ValueId>& olds, const std::string& op,
                                   const std::vector<ValueId>& inputs, const Attrs& attrs, const SymShape& target) {
  enter_region(n.region);
  const NodeId m = out_.add_node(op, inputs, attrs, target);
  Node& node = out_.mutable_node(m);
  node.label = n.label;
  node.gradient = n.gradient;
  node.backward = n.backward;
  TROUPE_CHECK(node.outputs.size() >= olds.size(), runtime, "graph pass: ", op, " in place of ", n.op,
               " has ", node.outputs.size(), " outputs, fewer than ", olds.size(), " (a pass bug)");
  const std::vector<ValueId> outs(node.outputs.begin(), node.outputs.begin() + static_cast<std::ptrdiff_t>(olds.size()));
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const ValueInfo &was = src_.value(olds[i]).info, &now = out_.value(outs[i]).info;
    TROUPE_CHECK(was.dtype == now.dtype && was.shape == now.shape, runtime, "graph pass: ", op, " in place of ",
                 n.op, " gives ", dtype_name(now.dtype), sym_shape_str(now.shape), " instead of ",
                 dtype_name(was.dtype), sym_shape_str(was.shape), " (a pass bug)");
    map_[static_cast<std::size_t>(olds[i])] = outs[i];
    claim(olds[i], outs[i]);
  }
  return m;
}

std::vector<ValueId> Rewriter::emit_before(const Node& next, const std::string& op, const std::vector<ValueId>& inputs,
                                           const Attrs& attrs) {
  return out_.node(emit_standing_for(next, {}, op, inputs, attrs)).outputs;
}

NodeId Rewriter::emit_relaid_for(const Node& n, const std::string& op, const std::vector<ValueId>& inputs,
                                 const Attrs& attrs) {
  for (ValueId o : n.outputs)
    TROUPE_CHECK(!is_output_[static_cast<std::size_t>(o)], runtime, "graph pass: graph output %", o,
                 " cannot change its layout (a pass bug)");
  const NodeId m = emit_standing_for(n, {}, op, inputs, attrs, n.target);
  const Node& node = out_.node(m);
  TROUPE_CHECK(node.outputs.size() == n.outputs.size(), runtime, "graph pass: ", op, " in place of ", n.op,
               " has another output count (a pass bug)");
  for (std::size_t i = 0; i < n.outputs.size(); ++i) map_[static_cast<std::size_t>(n.outputs[i])] = node.outputs[i];
  return m;
}

NodeId Rewriter::emit_retyped_for(const Node& n, const std::string& op, const std::vector<ValueId>& inputs,
                                  const Attrs& attrs) {
  const NodeId m = emit_standing_for(n, {}, op, inputs, attrs, n.target);
  const std::vector<ValueId> outs = out_.node(m).outputs;  // add_node below may move the node
  TROUPE_CHECK(outs.size() == n.outputs.size(), runtime, "graph pass: ", op, " in place of ", n.op,
               " has another output count (a pass bug)");
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const ValueId old = n.outputs[i];
    const ValueInfo &was = src_.value(old).info, &now = out_.value(outs[i]).info;
    TROUPE_CHECK(was.shape == now.shape, runtime, "graph pass: ", op, " in place of ", n.op, " changes a shape to ",
                 sym_shape_str(now.shape), " (a pass bug)");
    ValueId to = outs[i];
    if (is_output_[static_cast<std::size_t>(old)] && was.dtype != now.dtype) {
      const NodeId c = out_.add_node("cast", {to}, Attrs().set("dtype", static_cast<std::int64_t>(was.dtype)));
      out_.mutable_node(c).backward = n.backward;
      to = out_.node(c).outputs[0];
    }
    map_[static_cast<std::size_t>(old)] = to;
    claim(old, to);
  }
  return m;
}

bool Rewriter::can_replace(ValueId v, ValueId to) const {
  const ValueInfo &a = src_.value(v).info, &b = out_.value(to).info;
  if (a.dtype != b.dtype || a.shape != b.shape) return false;
  if (!is_output_[static_cast<std::size_t>(v)]) return true;
  const bool taken = static_cast<std::size_t>(to) < claimed_.size() && claimed_[static_cast<std::size_t>(to)];
  return out_.value(to).kind == ValueKind::op_output && !taken;
}

void Rewriter::replace(ValueId v, ValueId to) {
  TROUPE_CHECK(can_replace(v, to), runtime, "graph pass: value %", v, " cannot stand for %", to, " (a pass bug)");
  map_[static_cast<std::size_t>(v)] = to;
  claim(v, to);
}

ValueId Rewriter::constant(const Tensor& t) { return out_.add_constant(t); }

Graph Rewriter::finish() {
  enter_region(-1);
  for (ValueId v : src_.outputs()) out_.add_output(map(v));
  return std::move(out_);
}

bool rewritable(const Node& n) {
  return n.region < 0 && n.gradient.empty() && !OpRegistry::instance().get(n.op).side_effects;
}

bool known_dense(const Graph& g, ValueId v) {
  while (g.value(v).kind == ValueKind::op_output) {
    const Node& n = g.node(g.value(v).producer);
    if (OpRegistry::instance().get(n.op).kernel) return true;  // OpDef::run allocates dense outputs
    if (n.op != "reshape") return false;
    v = n.inputs[0];  // a reshape of a dense tensor is a dense view of it
  }
  return false;
}

Graph fuse_pairs(const Graph& g, const PairMatch& match, const PairEmit& emit) {
  const std::vector<int> readers = reader_counts(g);
  std::vector<const Node*> producer_of(g.nodes().size(), nullptr);  // by consumer node
  std::vector<bool> dropped(g.nodes().size(), false);
  for (const Node& n : g.nodes())
    if (const Node* producer = match(g, n, readers)) {
      producer_of[static_cast<std::size_t>(n.id)] = producer;
      dropped[static_cast<std::size_t>(producer->id)] = true;
    }
  Rewriter r(g);
  for (const Node& n : g.nodes()) {
    if (dropped[static_cast<std::size_t>(n.id)]) continue;
    if (const Node* producer = producer_of[static_cast<std::size_t>(n.id)])
      emit(r, n, *producer);
    else
      r.copy(n);
  }
  return r.finish();
}

const Node* sole_producer(const Graph& g, ValueId v, const std::vector<int>& readers, const char* op, int uses) {
  const Value& value = g.value(v);
  if (value.kind != ValueKind::op_output || readers[static_cast<std::size_t>(v)] != uses) return nullptr;
  const Node& n = g.node(value.producer);
  return n.op == op && rewritable(n) && !n.backward ? &n : nullptr;
}

std::vector<int> reader_counts(const Graph& g) {
  std::vector<int> readers(g.values().size(), 0);
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) ++readers[static_cast<std::size_t>(v)];
  for (ValueId v : g.outputs()) ++readers[static_cast<std::size_t>(v)];
  return readers;
}

}  // namespace troupe::graph::passes
