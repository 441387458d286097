#include "troupe/graph/var.hpp"

#include <map>

#include "tape.hpp"
#include "troupe/graph/dropout.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
thread_local bool t_grad_enabled = true;
thread_local TraceState* t_trace = nullptr;
thread_local std::map<std::string, std::string> t_overrides;

ValueInfo info_of(const Tensor& t) { return ValueInfo{t.dtype(), to_sym(t.shape())}; }

}  // namespace

ValueId lift(Graph* g, const Var& v, const std::string& op) {
  TraceState* trace = t_trace && t_trace->graph == g ? t_trace : nullptr;
  if (trace) {
    auto it = trace->lifted.find(v.key());
    if (it != trace->lifted.end()) return it->second;
  }
  ValueId id;
  if (v.requires_grad()) {
    TROUPE_CHECK(trace, invalid_argument, op, ": parameter '", v.name(),
                 "' is mixed with graph values outside trace(); trace the function that uses it");
    const std::string name =
        v.name().empty() ? "param" + std::to_string(trace->parameters.size()) : v.name();
    TROUPE_CHECK(g->find_parameter(name) < 0, invalid_argument, "trace: two different parameters are named '",
                 name, "'; parameter names must be unique");
    id = g->add_parameter(name, v.impl().info);
    trace->parameters.push_back(v);
  } else {
    id = g->add_constant(v.tensor());
  }
  if (trace) {
    trace->lifted[v.key()] = id;
    trace->held.push_back(v);
  }
  return id;
}

TraceState* active_trace() { return t_trace; }
TraceState* set_active_trace(TraceState* state) {
  TraceState* prev = t_trace;
  t_trace = state;
  return prev;
}

bool tracks_grad(const Var& v) { return v.defined() && (v.requires_grad() || v.impl().producer != nullptr); }

Var::Var(const Tensor& t) : impl_(std::make_shared<VarImpl>()) {
  TROUPE_CHECK(t.defined(), invalid_argument, "Var: cannot wrap an undefined tensor");
  impl_->value = t;
  impl_->info = info_of(t);
}

Var Var::leaf(const Tensor& t, const std::string& name) {
  TROUPE_CHECK(is_floating(t.dtype()), dtype_mismatch, "Var::leaf '", name, "': only floating tensors take gradients, got ",
               dtype_name(t.dtype()));
  Var v(t);
  v.impl_->requires_grad = true;
  v.impl_->name = name;
  return v;
}

Var Var::symbolic(Graph* graph, ValueId id) {
  Var v;
  v.impl_ = std::make_shared<VarImpl>();
  v.impl_->graph = graph;
  v.impl_->id = id;
  v.impl_->info = graph->value(id).info;
  return v;
}

VarImpl& Var::impl() const {
  TROUPE_CHECK(impl_, invalid_argument, "use of an undefined Var");
  return *impl_;
}

const Tensor& Var::tensor() const {
  TROUPE_CHECK(!is_symbolic(), invalid_argument, "Var::tensor(): value ", id(),
               " is symbolic (inside a trace); its tensor exists only when the graph runs");
  return impl().value;
}

void Var::set_value(const Tensor& t) const {
  TROUPE_CHECK(!is_symbolic(), invalid_argument, "Var::set_value: value ", id(), " is symbolic (inside a trace)");
  TROUPE_CHECK(!t.defined() || (to_sym(t.shape()) == shape() && t.dtype() == dtype()), shape_mismatch, "Var::set_value: '",
               name(), "' is ", dtype_name(dtype()), sym_shape_str(shape()), ", given ", dtype_name(t.dtype()), shape_str(t.shape()));
  impl().value = t;
}

SymDim Var::size(std::int64_t axis) const { return shape()[static_cast<std::size_t>(normalize_axis(axis, shape().size(), "size"))]; }

Var Var::reshape(const SymShape& s) const { return graph::reshape(*this, s); }
Var Var::transpose(std::int64_t a, std::int64_t b) const { return graph::transpose(*this, a, b); }
Var Var::permute(const std::vector<std::int64_t>& dims) const { return graph::permute(*this, dims); }

Var GradContext::grad_output(std::size_t i) const {
  return grad_outputs.at(i).defined() ? grad_outputs[i] : zeros_like(outputs.at(i));
}

std::vector<Var> apply(const std::string& op, const std::vector<Var>& inputs, const Attrs& attrs,
                       const SymShape& target, const std::string& label) {
  const OpDef& def = OpRegistry::instance().get(op);
  Graph* g = t_trace ? t_trace->graph : nullptr;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TROUPE_CHECK(inputs[i].defined(), invalid_argument, op, ": input ", i, " is undefined");
    if (!inputs[i].is_symbolic()) continue;
    if (!g) g = inputs[i].graph();
    TROUPE_CHECK(inputs[i].graph() == g, invalid_argument, op, ": input ", i,
                 " belongs to another graph (a value of one trace used in another)");
  }
  const std::string gradient = active_gradient_override(op);

  if (g) {
    std::vector<ValueId> ids;
    for (const auto& in : inputs) ids.push_back(in.is_symbolic() ? in.id() : lift(g, in, op));
    const NodeId n = g->add_node(op, ids, attrs, target);
    Node& node = g->mutable_node(n);
    node.label = label;
    node.gradient = gradient;
    std::vector<Var> outs;
    for (ValueId v : node.outputs) outs.push_back(Var::symbolic(g, v));
    return outs;
  }

  std::vector<ValueInfo> in_infos;
  std::vector<Tensor> tensors;
  for (const auto& in : inputs) {
    in_infos.push_back(in.impl().info);
    tensors.push_back(in.tensor());
  }
  const std::vector<ValueInfo> out_infos = def.infer(InferContext{op, in_infos, attrs, target});
  std::vector<Shape> out_shapes;
  std::vector<DType> out_dtypes;
  for (const auto& info : out_infos) {
    out_shapes.push_back(to_static(info.shape, op));
    out_dtypes.push_back(info.dtype);
  }
  std::vector<Tensor> results = def.run(tensors, ComputeContext{attrs, out_shapes, out_dtypes, label, eager_random_position()});

  std::vector<Var> outs;
  for (const auto& r : results) outs.emplace_back(r);
  bool record = false;
  if (grad_enabled())
    for (std::size_t i = 0; i < inputs.size(); ++i) record = record || (tracks_grad(inputs[i]) && def.differentiable(i));
  if (!record) return outs;  // nothing upstream wants a gradient (or it stops here: stop_gradient)
  GradFn rule = gradient.empty() ? def.grad : OpRegistry::instance().gradient(gradient);
  record_on_tape(op, inputs, outs, rule ? std::move(rule) : missing_gradient(op), attrs, target);
  return outs;
}

void record_on_tape(const std::string& op, const std::vector<Var>& inputs, std::vector<Var>& outputs, GradFn rule,
                    const Attrs& attrs, const SymShape& target) {
  auto entry = std::make_shared<TapeEntry>();
  entry->op = op;
  entry->attrs = attrs;
  entry->target = target;
  entry->inputs = inputs;
  entry->grad = std::move(rule);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    entry->outputs.push_back(outputs[i].tensor());
    if (!is_floating(outputs[i].dtype())) continue;
    outputs[i].impl().producer = entry;
    outputs[i].impl().output_index = static_cast<int>(i);
  }
}

Var apply1(const std::string& op, const std::vector<Var>& inputs, const Attrs& attrs, const SymShape& target,
           const std::string& label) {
  auto outs = apply(op, inputs, attrs, target, label);
  TROUPE_CHECK(outs.size() == 1, runtime, op, ": has ", outs.size(), " outputs; use apply()");
  return outs[0];
}

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }
bool grad_enabled() { return t_grad_enabled; }

GradientOverride::GradientOverride(const std::string& op, const std::string& gradient) : op_(op) {
  OpRegistry::instance().gradient(gradient);  // fail now, not at backward time, if unknown
  auto it = t_overrides.find(op);
  had_previous_ = it != t_overrides.end();
  if (had_previous_) previous_ = it->second;
  t_overrides[op] = gradient;
}
GradientOverride::~GradientOverride() {
  if (had_previous_) t_overrides[op_] = previous_;
  else t_overrides.erase(op_);
}
std::string active_gradient_override(const std::string& op) {
  auto it = t_overrides.find(op);
  return it == t_overrides.end() ? std::string() : it->second;
}

}  // namespace troupe::graph
