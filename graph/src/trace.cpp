#include "troupe/graph/trace.hpp"

#include <cstdlib>
#include <set>

#include "tape.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
// Resolves -1 dims of a signature to per-input symbols.
std::vector<InputSpec> resolve(const std::vector<InputSpec>& signature) {
  std::vector<InputSpec> out = signature;
  std::set<std::string> names;
  for (InputSpec& spec : out) {
    TROUPE_CHECK(!spec.name.empty(), invalid_argument, "trace: every input of the signature needs a name");
    TROUPE_CHECK(names.insert(spec.name).second, invalid_argument, "trace: input name '", spec.name,
                 "' appears twice in the signature");
    for (std::size_t d = 0; d < spec.shape.size(); ++d) {
      SymDim& dim = spec.shape[d];
      if (dim.is_static() && dim.size() == -1) dim = SymDim::symbol(spec.name + "." + std::to_string(d));
      TROUPE_CHECK(!dim.is_static() || dim.size() >= 0, invalid_argument, "trace: input '", spec.name, "' dim ", d,
                   " is ", dim.size(), "; use a size, -1 (dynamic) or a named symbol");
    }
  }
  return out;
}

// Ends the active trace on scope exit, also when the traced function throws.
struct TraceScope {
  TraceState* previous;
  explicit TraceScope(TraceState* s) : previous(set_active_trace(s)) {}
  ~TraceScope() { set_active_trace(previous); }
};
}  // namespace

TracedFunction trace(const TraceableFn& fn, const std::vector<InputSpec>& signature) {
  TracedFunction f;
  f.signature_ = resolve(signature);
  auto graph = std::make_shared<Graph>();
  TraceState state;
  state.graph = graph.get();
  std::vector<Var> outs;
  {
    TraceScope scope(&state);
    std::vector<Var> ins;
    for (const InputSpec& spec : f.signature_)
      ins.push_back(Var::symbolic(graph.get(), graph->add_input(spec.name, ValueInfo{spec.dtype, spec.shape})));
    outs = fn(ins);
    for (Var& o : outs) {
      TROUPE_CHECK(o.defined(), invalid_argument, "trace: the function returned an undefined value");
      graph->add_output(o.is_symbolic() ? o.id() : lift(graph.get(), o, "trace"));
    }
  }
  f.outputs_ = outs.size();
  f.parameters_ = state.parameters;
  f.graph_ = std::move(graph);
  return f;
}

TracedFunction TracedFunction::with_graph(std::shared_ptr<const Graph> graph, std::vector<InputSpec> signature,
                                          std::vector<Var> parameters) const {
  TROUPE_CHECK(graph && graph->outputs().size() == graph_->outputs().size() && graph->inputs().size() == signature.size() &&
                   graph->parameters().size() == parameters.size() && parameters.size() == parameters_.size(),
               invalid_argument, "with_graph: the new graph must keep the function's inputs, parameters and outputs");
  TracedFunction f = *this;
  f.graph_ = std::move(graph);
  f.signature_ = std::move(signature);
  f.parameters_ = std::move(parameters);
  f.memory_ = nullptr;
  return f;
}

TracedFunction TracedFunction::with_gradients(const std::vector<Var>& params, const Var& loss_scale) const {
  TracedFunction f = *this;
  auto g = std::make_shared<Graph>(*graph_);
  const ValueId seed = f.add_loss_scale(*g, loss_scale);
  std::vector<ValueId> outputs = g->outputs();
  f.append_gradients(*g, params, g->outputs()[0], seed, {}, outputs);
  g->set_outputs(std::move(outputs));
  f.graph_ = std::move(g);
  f.memory_ = nullptr;  // plans are per graph: optimized(3) plans the new one
  return f;
}

ValueId TracedFunction::add_loss_scale(Graph& g, const Var& loss_scale) {
  if (!loss_scale.defined()) return -1;
  TROUPE_CHECK(!loss_scale.is_symbolic() && loss_scale.tensor().dim() == 0, invalid_argument,
               "with_gradients: the loss scale must be an eager 0-d tensor (GradScaler::scale_var())");
  const ValueId seed =
      g.add_parameter(loss_scale.name().empty() ? "loss_scale" : loss_scale.name(), ValueInfo{loss_scale.dtype(), {}});
  loss_scale_ = static_cast<int>(parameters_.size());
  parameters_.push_back(loss_scale);
  return seed;
}

std::vector<ValueId> TracedFunction::append_gradients(Graph& g, const std::vector<Var>& params, ValueId loss, ValueId seed,
                                                      const std::vector<ValueId>& extra, std::vector<ValueId>& outputs) {
  TROUPE_CHECK(outputs_ > 0, invalid_argument, "with_gradients: the traced function has no output to differentiate");
  TROUPE_CHECK(grad_parameters_.empty(), invalid_argument, "with_gradients: this function already has gradients");
  TROUPE_CHECK(!inference_, invalid_argument,
               "with_gradients: this function was made for inference (custom gradients dropped); take the "
               "gradients of the traced function before for_inference()");
  // A parameter the function never read simply gets no gradient, as in eager mode.
  for (const Var& p : params)
    TROUPE_CHECK(p.requires_grad(), invalid_argument, "with_gradients: '", p.name(),
                 "' is not a parameter (create it with Var::leaf)");
  std::vector<ValueId> wrt;
  std::vector<std::size_t> wanted;
  const std::size_t read = loss_scale_ >= 0 ? parameters_.size() - 1 : parameters_.size();  // not the seed itself
  for (std::size_t k = 0; k < read; ++k) {
    bool asked = params.empty();
    for (const Var& p : params) asked = asked || p.key() == parameters_[k].key();
    if (!asked) continue;
    wrt.push_back(g.parameters()[k]);
    wanted.push_back(k);
  }
  wrt.insert(wrt.end(), extra.begin(), extra.end());
  const std::vector<ValueId> grads = append_backward(g, loss, wrt, seed);
  for (std::size_t k = 0; k < wanted.size(); ++k) {
    if (grads[k] < 0) continue;  // the output does not depend on it
    outputs.push_back(grads[k]);
    grad_parameters_.push_back(wanted[k]);
  }
  return {grads.begin() + static_cast<std::ptrdiff_t>(wanted.size()), grads.end()};
}

TracedFunction TracedFunction::for_inference() const {
  TROUPE_CHECK(grad_parameters_.empty(), invalid_argument,
               "for_inference: this function computes gradients; trace the forward function alone");
  TracedFunction f = *this;
  f.graph_ = std::make_shared<const Graph>(graph_->inference_graph());
  f.inference_ = true;
  f.memory_ = nullptr;
  return f;
}

TracedFunction TracedFunction::with_amp(const AmpOptions& amp) const {
  if (amp.level == AmpLevel::O0) return *this;
  TracedFunction f = *this;
  f.graph_ = std::make_shared<const Graph>(autocast(*graph_, amp.dtype, amp.level));
  return f;
}

TracedFunction TracedFunction::optimized(int level) const {
  TracedFunction f = *this;
  OptimizeOptions options;
  options.inference = inference_;
  f.graph_ = std::make_shared<const Graph>(optimize(*graph_, level, options));
  const bool device_memory = level >= 3 && !options.disabled.count(kMemoryPlanningPass);
  f.memory_ = device_memory ? std::make_shared<ArenaLayoutCache>() : nullptr;
  return f;
}

std::vector<Tensor> TracedFunction::operator()(const std::vector<Tensor>& inputs) const {
  TROUPE_CHECK(inputs.size() == signature_.size(), invalid_argument, "traced function takes ", signature_.size(),
               " inputs, got ", inputs.size());
  std::vector<Tensor> params;
  for (const Var& p : parameters_) params.push_back(p.tensor());
  std::vector<Tensor> results;
  auto call = [&] {
    results = execute(*graph_, inputs, params, {}, memory_ != nullptr);
    for (std::size_t k = 0; k < grad_parameters_.size(); ++k) {
      const Var& p = parameters_[grad_parameters_[k]];
      const Tensor& g = results[outputs_ + k];
      // As PyTorch's AccumulateGrad does: add in place unless someone else holds the gradient.
      if (!p.grad().defined())
        p.set_grad(g);
      else if (p.grad().storage().use_count() == 1 && p.grad().is_contiguous())
        kernels::binary_into(kernels::BinaryOp::add, p.grad(), g, p.grad());
      else
        p.set_grad(kernels::add(p.grad(), g));
    }
    results.resize(outputs_);
  };
  if (!memory_) {
    call();
    return results;
  }
  std::vector<Shape> key;
  for (const Tensor& t : inputs) key.push_back(t.shape());
  memory_->run(key, call);
  return results;
}

MemoryPlanReport TracedFunction::memory_report() const {
  TROUPE_CHECK(memory_, invalid_argument, "memory_report: this function is not memory-planned (JIT level 3 plans)");
  return memory_->report();
}

int jit_level() {
  const char* env = std::getenv("JIT_LEVEL");
  if (!env || !*env) return 3;
  const std::string s(env);
  TROUPE_CHECK(s.size() == 1 && s[0] >= '0' && s[0] <= '3', invalid_argument, "JIT_LEVEL='", s,
               "' is not valid; use 0 (eager), 1 (traced), 2 or 3 (traced with graph passes)");
  return s[0] - '0';
}

Jit::Jit(TraceableFn fn, std::vector<InputSpec> signature, bool gradients, int level, AmpOptions amp)
    : fn_(std::move(fn)), signature_(std::move(signature)), gradients_(gradients) {
  TROUPE_CHECK(level >= 0 && level <= 3, invalid_argument, "jit level ", level, " is not in 0..3");
  TROUPE_CHECK(level > 0 || amp.level == AmpLevel::O0, invalid_argument, "mixed precision ", to_string(amp.level),
               " rewrites traced graphs; jit level 0 runs eagerly");
  if (level == 0) return;
  TracedFunction t = trace(fn_, signature_).with_amp(amp);
  if (gradients_)
    t = t.optimized(level).with_gradients();  // fuse forward chains before autodiff
  else
    t = t.for_inference();
  traced_ = std::make_shared<TracedFunction>(t.optimized(level));
}

std::vector<Tensor> Jit::operator()(const std::vector<Tensor>& inputs) const {
  if (traced_) return (*traced_)(inputs);
  // Eager: check the signature the same way the graph would, so switching levels changes nothing.
  Graph shape_only;
  for (const InputSpec& spec : resolve(signature_)) shape_only.add_input(spec.name, ValueInfo{spec.dtype, spec.shape});
  bind_inputs(shape_only, inputs);
  std::vector<Var> ins(inputs.begin(), inputs.end());
  std::vector<Var> outs = fn_(ins);
  if (gradients_ && !outs.empty()) backward(outs[0]);
  std::vector<Tensor> results;
  for (const Var& o : outs) results.push_back(o.tensor());
  return results;
}

const TracedFunction& Jit::traced_function() const {
  TROUPE_CHECK(traced_, invalid_argument, "Jit: running eagerly (JIT_LEVEL=0); there is no traced graph");
  return *traced_;
}

}  // namespace troupe::graph
