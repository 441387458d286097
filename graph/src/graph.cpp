#include "troupe/graph/graph.hpp"

#include <sstream>

#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::input: return "input";
    case ValueKind::parameter: return "param";
    case ValueKind::constant: return "const";
    case ValueKind::op_output: return "value";
  }
  return "?";
}

std::string info_str(const ValueInfo& info) { return std::string(dtype_name(info.dtype)) + sym_shape_str(info.shape); }

std::string attr_str(const AttrValue& v) {
  std::ostringstream os;
  if (auto i = std::get_if<std::int64_t>(&v)) os << *i;
  else if (auto d = std::get_if<double>(&v)) os << *d;
  else {
    const auto& l = std::get<std::vector<std::int64_t>>(v);
    os << '[';
    for (std::size_t k = 0; k < l.size(); ++k) os << (k ? "," : "") << l[k];
    os << ']';
  }
  return os.str();
}
}  // namespace

ValueId Graph::new_value(ValueKind kind, ValueInfo info, const std::string& name) {
  Value v;
  v.id = static_cast<ValueId>(values_.size());
  v.kind = kind;
  v.info = std::move(info);
  v.name = name;
  values_.push_back(std::move(v));
  return values_.back().id;
}

ValueId Graph::add_input(const std::string& name, ValueInfo info) {
  const ValueId v = new_value(ValueKind::input, std::move(info), name);
  inputs_.push_back(v);
  return v;
}

ValueId Graph::add_parameter(const std::string& name, ValueInfo info) {
  TROUPE_CHECK(find_parameter(name) < 0, invalid_argument, "graph: parameter '", name, "' already exists");
  const ValueId v = new_value(ValueKind::parameter, std::move(info), name);
  parameters_.push_back(v);
  return v;
}

ValueId Graph::add_constant(const Tensor& value) {
  const ValueId v = new_value(ValueKind::constant, ValueInfo{value.dtype(), to_sym(value.shape())}, "");
  values_[static_cast<std::size_t>(v)].constant = value;
  return v;
}

NodeId Graph::add_node(const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs,
                       const SymShape& target) {
  const OpDef& def = OpRegistry::instance().get(op);
  std::vector<ValueInfo> infos;
  for (ValueId v : inputs) {
    TROUPE_CHECK(v >= 0 && v < static_cast<ValueId>(values_.size()), invalid_argument, op, ": input value ", v,
                 " is not in this graph");
    infos.push_back(value(v).info);
  }
  std::vector<ValueInfo> outs = def.infer(InferContext{op, infos, attrs, target});
  Node n;
  n.id = static_cast<NodeId>(nodes_.size());
  n.op = op;
  n.inputs = inputs;
  n.attrs = attrs;
  n.target = target;
  n.region = open_region_;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const ValueId v = new_value(ValueKind::op_output, std::move(outs[i]), "");
    values_[static_cast<std::size_t>(v)].producer = n.id;
    values_[static_cast<std::size_t>(v)].output_index = static_cast<int>(i);
    n.outputs.push_back(v);
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

int Graph::begin_region(const std::string& name, const std::vector<ValueId>& inputs) {
  TROUPE_CHECK(open_region_ < 0, unsupported, "custom gradient '", name, "' is nested inside '",
               regions_[static_cast<std::size_t>(open_region_)].name,
               "'; nested custom gradients are not supported, give the outer function the whole backward");
  CustomRegion r;
  r.name = name;
  r.inputs = inputs;
  r.first = static_cast<NodeId>(nodes_.size());
  regions_.push_back(std::move(r));
  open_region_ = static_cast<int>(regions_.size()) - 1;
  return open_region_;
}

void Graph::end_region(int r, const std::vector<ValueId>& outputs, RegionBackward backward) {
  CustomRegion& region = regions_.at(static_cast<std::size_t>(r));
  region.outputs = outputs;
  region.last = static_cast<NodeId>(nodes_.size()) - 1;
  region.backward = std::move(backward);
  open_region_ = -1;
}

ValueId Graph::find_parameter(const std::string& name) const {
  for (ValueId v : parameters_)
    if (value(v).name == name) return v;
  return -1;
}

std::string Graph::dump() const {
  std::ostringstream os;
  for (const auto& v : values_) {
    if (v.kind == ValueKind::op_output) continue;
    os << '%' << v.id << " = " << kind_name(v.kind);
    if (!v.name.empty()) os << " \"" << v.name << '"';
    os << " : " << info_str(v.info) << '\n';
  }
  for (const auto& n : nodes_) {
    for (std::size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << '%' << n.outputs[i];
    os << " = " << n.op << '(';
    for (std::size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << '%' << n.inputs[i];
    os << ')';
    std::vector<std::string> extras;
    for (const auto& [name, value] : n.attrs.items()) extras.push_back(name + "=" + attr_str(value));
    if (!n.target.empty()) extras.push_back("shape=" + sym_shape_str(n.target));
    if (!n.label.empty()) extras.push_back("label=\"" + n.label + "\"");
    if (!n.gradient.empty()) extras.push_back("gradient=" + n.gradient);
    if (n.region >= 0) extras.push_back("custom_gradient=" + regions_[static_cast<std::size_t>(n.region)].name);
    if (n.backward) extras.push_back("backward");
    if (!extras.empty()) {
      os << " {";
      for (std::size_t i = 0; i < extras.size(); ++i) os << (i ? ", " : "") << extras[i];
      os << '}';
    }
    os << " : ";
    for (std::size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << info_str(value(n.outputs[i]).info);
    os << '\n';
  }
  os << "outputs:";
  for (ValueId v : outputs_) os << " %" << v;
  os << '\n';
  return os.str();
}

Graph Graph::inference_graph() const {
  Graph g;
  std::vector<ValueId> map(values_.size(), -1);
  for (const auto& v : values_) {
    if (v.kind == ValueKind::input) map[v.id] = g.add_input(v.name, v.info);
    else if (v.kind == ValueKind::parameter) map[v.id] = g.add_parameter(v.name, v.info);
    else if (v.kind == ValueKind::constant) map[v.id] = g.add_constant(v.constant);
  }
  for (const auto& n : nodes_) {
    if (n.backward) continue;
    std::vector<ValueId> ins;
    for (ValueId v : n.inputs) ins.push_back(map[v]);
    const NodeId m = g.add_node(n.op, ins, n.attrs, n.target);
    g.mutable_node(m).label = n.label;
    for (std::size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = g.node(m).outputs[i];
  }
  for (ValueId v : outputs_)
    if (map[v] >= 0) g.add_output(map[v]);
  return g;
}

}  // namespace troupe::graph
