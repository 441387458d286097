#pragma once
// Private state shared by eager execution, backward() and tracing: the tape record of one eager op
// and the per-thread trace state.

#include <map>
#include <string>
#include <vector>

#include "troupe/graph/op_def.hpp"
#include "troupe/graph/var.hpp"

namespace troupe::graph {

/// One recorded eager op: enough to run its gradient rule later.
struct TapeEntry {
  std::string op;
  Attrs attrs;
  SymShape target;
  std::vector<Var> inputs;
  std::vector<Tensor> outputs;  // values, not Vars: outputs point at their entry, not the reverse
  GradFn grad;                  // the rule to run (the op's own, an override, or a custom backward)
  std::vector<Tensor> grads;    // gradients arriving at the outputs, filled during backward()
};

/// A trace in progress on this thread: the graph being built and the eager values lifted into it.
struct TraceState {
  Graph* graph = nullptr;
  std::map<const VarImpl*, ValueId> lifted;  // eager Var -> its parameter/constant value
  std::vector<Var> held;                     // the lifted Vars, kept alive so their keys stay unique
  std::vector<Var> parameters;               // in the order of graph->parameters()
};

/// The innermost active trace on this thread, or nullptr.
TraceState* active_trace();
/// Makes `state` the active trace (nullptr ends it); returns the previous one.
TraceState* set_active_trace(TraceState* state);

/// The graph value standing for eager Var `v` inside graph `g`: a parameter when tracing a leaf
/// that needs a gradient, a constant otherwise; cached per trace so one tensor becomes one value.
/// `op` names the caller in errors.
ValueId lift(Graph* g, const Var& v, const std::string& op);

/// Records eager outputs `outputs` of `op` (computed from `inputs`) on the tape with gradient `rule`.
void record_on_tape(const std::string& op, const std::vector<Var>& inputs, std::vector<Var>& outputs, GradFn rule,
                    const Attrs& attrs = {}, const SymShape& target = {});

/// True when an eager Var takes part in gradient recording (a leaf needing grad, or taped).
bool tracks_grad(const Var& v);

}  // namespace troupe::graph
