#include "troupe/graph/autodiff.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include "tape.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {

// Checks that the gradient a rule produced for input `i` of `op` fits that input.
void check_gradient(const std::string& op, std::size_t i, const ValueInfo& input, const Var& grad) {
  TROUPE_CHECK(grad.dtype() == input.dtype && grad.shape() == input.shape, runtime, "gradient rule of '", op,
               "' returned ", dtype_name(grad.dtype()), sym_shape_str(grad.shape()), " for input ", i, " of ",
               dtype_name(input.dtype), sym_shape_str(input.shape), "; the rule is wrong");
}

void check_scalar_loss(const SymShape& shape, const char* where) {
  TROUPE_CHECK(is_static(shape) && numel(shape).size() == 1, shape_mismatch, where, ": the loss has shape ",
               sym_shape_str(shape), "; reduce it to one element (sum or mean) or pass its gradient explicitly");
}

// Tape entries reachable from `root`, producers before consumers.
std::vector<TapeEntry*> topological_order(TapeEntry* root) {
  std::vector<TapeEntry*> order;
  std::set<TapeEntry*> seen;
  std::vector<std::pair<TapeEntry*, std::size_t>> stack{{root, 0}};
  seen.insert(root);
  while (!stack.empty()) {
    auto& [entry, next] = stack.back();
    if (next < entry->inputs.size()) {
      const Var& in = entry->inputs[next++];
      TapeEntry* p = in.impl().producer.get();
      if (p && seen.insert(p).second) stack.emplace_back(p, 0);
      continue;
    }
    order.push_back(entry);
    stack.pop_back();
  }
  return order;
}

// Adds `g` to `slot`; the first gradient of a leaf is copied so later in-place updates of the
// leaf's grad cannot alias a tensor a rule also returned elsewhere.
void accumulate(Tensor& slot, const Tensor& g, bool fresh_copy) {
  if (!slot.defined()) slot = fresh_copy ? g.clone() : g;
  else slot = kernels::add(slot, g);
}

}  // namespace

void backward(const Var& loss, const Tensor& grad_output) {
  TROUPE_CHECK(loss.defined(), invalid_argument, "backward: the loss is undefined");
  TROUPE_CHECK(!loss.is_symbolic(), invalid_argument,
               "backward: the loss is a traced value; inside trace() ask for gradients with "
               "TracedFunction::with_gradients() (or append_backward on the graph)");
  Tensor seed = grad_output;
  if (seed.defined()) {
    TROUPE_CHECK(seed.shape() == loss.tensor().shape() && seed.dtype() == loss.dtype(), shape_mismatch,
                 "backward: grad_output ", seed.str(), " must match the loss ", loss.tensor().str());
  } else {
    check_scalar_loss(loss.shape(), "backward");
    seed = Tensor::full(loss.tensor().shape(), 1.0, loss.dtype());
  }
  if (loss.requires_grad()) {  // the loss is itself a leaf
    Tensor g = loss.grad();
    accumulate(g, seed, true);
    loss.set_grad(g);
    return;
  }
  TapeEntry* root = loss.impl().producer.get();
  TROUPE_CHECK(root, invalid_argument,
               "backward: the loss does not depend on any tensor that requires a gradient (no parameters were "
               "used, or it was computed under NoGradGuard or through stop_gradient)");
  const std::vector<TapeEntry*> order = topological_order(root);
  for (TapeEntry* e : order) e->grads.clear();  // leftovers of a backward() that threw
  root->grads.assign(root->outputs.size(), Tensor());
  root->grads[static_cast<std::size_t>(loss.impl().output_index)] = seed;

  NoGradGuard no_grad;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    TapeEntry& e = **it;
    e.grads.resize(e.outputs.size());
    bool any = false;
    for (const Tensor& g : e.grads) any = any || g.defined();
    if (!any) continue;
    std::vector<Var> outputs, grads;
    for (std::size_t i = 0; i < e.outputs.size(); ++i) {
      outputs.emplace_back(e.outputs[i]);
      grads.push_back(e.grads[i].defined() ? Var(e.grads[i]) : Var());
    }
    std::vector<bool> needs(e.inputs.size());
    const OpDef* def = nullptr;
    if (e.op.rfind("custom:", 0) != 0) def = &OpRegistry::instance().get(e.op);
    for (std::size_t i = 0; i < e.inputs.size(); ++i)
      needs[i] = tracks_grad(e.inputs[i]) && is_floating(e.inputs[i].dtype()) && (!def || def->differentiable(i));
    GradContext ctx{e.inputs, outputs, grads, e.attrs, e.target, needs};
    const std::vector<Var> input_grads = e.grad(ctx);
    TROUPE_CHECK(input_grads.size() == e.inputs.size(), runtime, "gradient rule of '", e.op, "' returned ",
                 input_grads.size(), " gradients for ", e.inputs.size(), " inputs");
    e.grads.clear();  // free as we go: this entry's output gradients are consumed
    for (std::size_t i = 0; i < e.inputs.size(); ++i) {
      if (!needs[i] || !input_grads[i].defined()) continue;
      VarImpl& in = e.inputs[i].impl();
      check_gradient(e.op, i, in.info, input_grads[i]);
      if (in.requires_grad) {
        accumulate(in.grad, input_grads[i].tensor(), true);
      } else {
        TapeEntry& p = *in.producer;
        p.grads.resize(p.outputs.size());
        accumulate(p.grads[static_cast<std::size_t>(in.output_index)], input_grads[i].tensor(), false);
      }
    }
  }
}

std::vector<ValueId> append_backward(Graph& g, ValueId loss, const std::vector<ValueId>& wrt, ValueId seed) {
  TROUPE_CHECK(loss >= 0 && loss < static_cast<ValueId>(g.values().size()), invalid_argument,
               "append_backward: loss value ", loss, " is not in this graph");
  if (seed < 0) check_scalar_loss(g.value(loss).info.shape, "append_backward");
  // Gradient rules build nodes through apply(); they must land in `g`, not in an unrelated trace.
  TraceState* outer = active_trace();
  const bool foreign = outer && outer->graph != &g;
  if (foreign) set_active_trace(nullptr);
  struct Restore {
    TraceState* s;
    bool on;
    ~Restore() {
      if (on) set_active_trace(s);
    }
  } restore{outer, foreign};

  const NodeId forward_end = static_cast<NodeId>(g.nodes().size());
  const auto value_count = g.values().size();
  // depends[v]: v is computed from some wrt value through differentiable inputs.
  std::vector<bool> depends(value_count, false);
  for (ValueId w : wrt) {
    TROUPE_CHECK(w >= 0 && w < static_cast<ValueId>(value_count), invalid_argument, "append_backward: value ", w,
                 " is not in this graph");
    TROUPE_CHECK(is_floating(g.value(w).info.dtype), dtype_mismatch, "append_backward: value %", w, " is ",
                 dtype_name(g.value(w).info.dtype), "; only floating values have gradients");
    depends[static_cast<std::size_t>(w)] = true;
  }
  for (NodeId n = 0; n < forward_end; ++n) {
    const Node& node = g.node(n);
    if (node.backward) continue;
    const OpDef& def = OpRegistry::instance().get(node.op);
    bool d = false;
    for (std::size_t i = 0; i < node.inputs.size(); ++i)
      d = d || (depends[static_cast<std::size_t>(node.inputs[i])] && def.differentiable(i));
    // (A wrt value a node computes, a pipeline stage's received input, depends on itself.)
    for (ValueId o : node.outputs) depends[static_cast<std::size_t>(o)] = depends[static_cast<std::size_t>(o)] || (d && is_floating(g.value(o).info.dtype));
  }
  // A region's outputs depend on its inputs even if an op inside blocks the flow: its backward
  // is the user's.
  for (const CustomRegion& r : g.regions()) {
    bool d = false;
    for (ValueId v : r.inputs) d = d || depends[static_cast<std::size_t>(v)];
    for (ValueId o : r.outputs) depends[static_cast<std::size_t>(o)] = d && is_floating(g.value(o).info.dtype);
  }

  std::vector<Var> grad(value_count);
  auto add_grad = [&](ValueId v, const Var& gv) {
    Var& slot = grad[static_cast<std::size_t>(v)];
    slot = slot.defined() ? slot + gv : gv;
  };
  if (seed < 0) {
    add_grad(loss, zeros_like(Var::symbolic(&g, loss)) + 1.0);
  } else {
    const ValueInfo &l = g.value(loss).info, &s = g.value(seed).info;
    TROUPE_CHECK(l.dtype == s.dtype && l.shape == s.shape, invalid_argument, "append_backward: the seed %", seed, " is ",
                 dtype_name(s.dtype), sym_shape_str(s.shape), "; the loss is ", dtype_name(l.dtype), sym_shape_str(l.shape));
    add_grad(loss, Var::symbolic(&g, seed));
  }

  // Runs `rule` for a node or region with the given inputs/outputs and routes the results.
  auto run_rule = [&](const std::string& what, const GradFn& rule, const std::vector<ValueId>& ins,
                      const std::vector<ValueId>& outs, const Attrs& attrs, const SymShape& target,
                      const std::string& label, const std::function<bool(std::size_t)>& differentiable) {
    std::vector<Var> out_vars, out_grads, in_vars;
    bool any = false;
    for (ValueId o : outs) {
      out_vars.push_back(Var::symbolic(&g, o));
      out_grads.push_back(grad[static_cast<std::size_t>(o)]);
      any = any || out_grads.back().defined();
    }
    std::vector<bool> needs;
    bool any_need = false;
    for (std::size_t i = 0; i < ins.size(); ++i) {
      in_vars.push_back(Var::symbolic(&g, ins[i]));
      needs.push_back(depends[static_cast<std::size_t>(ins[i])] && differentiable(i));
      any_need = any_need || needs.back();
    }
    if (!any || !any_need) return;
    GradContext ctx{in_vars, out_vars, out_grads, attrs, target, needs, label};
    const std::vector<Var> in_grads = rule(ctx);
    TROUPE_CHECK(in_grads.size() == ins.size(), runtime, "gradient rule of '", what, "' returned ", in_grads.size(),
                 " gradients for ", ins.size(), " inputs");
    for (std::size_t i = 0; i < ins.size(); ++i) {
      if (!needs[i] || !in_grads[i].defined()) continue;
      Var gi = in_grads[i];
      if (!gi.is_symbolic()) gi = Var::symbolic(&g, lift(&g, gi, what));  // a rule may return a constant
      check_gradient(what, i, g.value(ins[i]).info, gi);
      add_grad(ins[i], gi);
    }
  };

  for (NodeId n = forward_end - 1; n >= 0; --n) {
    const Node node = g.node(n);  // a copy: rules append nodes and may move the node list
    if (node.backward) continue;
    if (node.region >= 0) {
      const CustomRegion region = g.regions()[static_cast<std::size_t>(node.region)];
      // Gradient arriving at a value inside the region that is not one of its outputs would be lost.
      for (NodeId m = region.first; m <= region.last; ++m)
        for (ValueId o : g.node(m).outputs) {
          const bool is_output = std::find(region.outputs.begin(), region.outputs.end(), o) != region.outputs.end();
          TROUPE_CHECK(is_output || !grad[static_cast<std::size_t>(o)].defined(), unsupported, "custom gradient '",
                       region.name, "': intermediate value %", o,
                       " is used outside the function; return it as an output so its gradient is defined");
        }
      const Attrs none;
      run_rule("custom:" + region.name, region.backward, region.inputs, region.outputs, none, {}, "",
               [](std::size_t) { return true; });
      n = region.first;  // skip the region's own nodes
    } else {
      const OpDef& def = OpRegistry::instance().get(node.op);
      GradFn rule = node.gradient.empty() ? def.grad : OpRegistry::instance().gradient(node.gradient);
      if (!rule) rule = missing_gradient(node.op);
      run_rule(node.op, rule, node.inputs, node.outputs, node.attrs, node.target, node.label,
               [&](std::size_t i) { return def.differentiable(i); });
    }
  }
  for (NodeId m = forward_end; m < static_cast<NodeId>(g.nodes().size()); ++m) g.mutable_node(m).backward = true;
  std::vector<ValueId> result;
  for (ValueId w : wrt) result.push_back(grad[static_cast<std::size_t>(w)].defined() ? grad[static_cast<std::size_t>(w)].id() : -1);
  return result;
}

}  // namespace troupe::graph
