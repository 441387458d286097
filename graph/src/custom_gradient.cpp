#include "troupe/graph/custom_gradient.hpp"

#include "tape.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
const GradientRegistrar straight_through(kStraightThrough, [](const GradContext& c) -> std::vector<Var> {
  std::vector<Var> grads(c.inputs.size());
  grads[0] = c.grad_output(0);
  return grads;
});
}  // namespace

std::vector<Var> custom_gradient(const std::string& name, const CustomForward& forward, const RegionBackward& backward,
                                 const std::vector<Var>& inputs) {
  TROUPE_CHECK(forward && backward, invalid_argument, "custom gradient '", name, "' needs a forward and a backward");
  Graph* g = active_trace() ? active_trace()->graph : nullptr;
  for (const Var& in : inputs) {
    TROUPE_CHECK(in.defined(), invalid_argument, "custom gradient '", name, "': an input is undefined");
    if (!g && in.is_symbolic()) g = in.graph();
  }
  if (g) {
    std::vector<ValueId> ids;
    std::vector<Var> symbolic;
    for (const Var& in : inputs) {
      ids.push_back(in.is_symbolic() ? in.id() : lift(g, in, name));
      symbolic.push_back(Var::symbolic(g, ids.back()));
    }
    const int region = g->begin_region(name, ids);
    std::vector<Var> outs;
    try {
      outs = forward(symbolic);
    } catch (...) {
      g->end_region(region, {}, backward);
      throw;
    }
    std::vector<ValueId> out_ids;
    for (const Var& o : outs) {
      TROUPE_CHECK(o.defined() && o.is_symbolic() && o.graph() == g, invalid_argument, "custom gradient '", name,
                   "': the forward must return values computed from its inputs with graph ops");
      out_ids.push_back(o.id());
    }
    g->end_region(region, out_ids, backward);
    return outs;
  }
  // Eager: the forward runs untaped; one tape entry with the user's backward stands for all of it.
  std::vector<Var> outs;
  {
    NoGradGuard no_grad;
    outs = forward(inputs);
  }
  bool record = grad_enabled();
  bool any_tracked = false;
  for (const Var& in : inputs) any_tracked = any_tracked || tracks_grad(in);
  if (!record || !any_tracked) return outs;
  for (Var& o : outs) o = Var(o.tensor());  // fresh handles: the forward's own vars carry no tape
  record_on_tape("custom:" + name, inputs, outs, backward);
  return outs;
}

Var custom_relu(const Var& x, double negative_slope) {
  return custom_gradient(
      "custom_relu", [](const std::vector<Var>& in) { return std::vector<Var>{relu(in[0])}; },
      [negative_slope](const GradContext& c) {
        return std::vector<Var>{relu_backward(c.grad_output(0), c.inputs[0], negative_slope)};
      },
      {x})[0];
}

}  // namespace troupe::graph
