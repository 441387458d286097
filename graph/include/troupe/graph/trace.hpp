#pragma once
// Tracing (jit): a C++ callable written with the ops API is run once on symbolic inputs described by
// an input signature, which records a Graph; calling the TracedFunction executes that graph. Dims of
// the signature may be dynamic, so one trace serves every batch size. JIT_LEVEL picks eager or traced.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/graph/amp.hpp"
#include "troupe/graph/graph.hpp"
#include "troupe/graph/arena_layouts.hpp"
#include "troupe/graph/var.hpp"

namespace troupe::graph {

struct StageChannels;

/// One argument of a traced function. A dim of -1 is dynamic with its own symbol ("<name>.<dim>");
/// SymDim::symbol("batch") is dynamic and shared by every input that names it.
struct InputSpec {
  std::string name;
  SymShape shape;
  DType dtype = DType::f32;
};

/// A function of Vars: what trace() and Jit accept.
using TraceableFn = std::function<std::vector<Var>(const std::vector<Var>& inputs)>;

/// A traced graph with its signature and the eager parameters it reads at each call.
class TracedFunction {
 public:
  /// Runs the graph on `inputs`; throws naming the input, the expected and the actual shape when
  /// they do not fit the signature. With gradients, also accumulates into the parameters' grad().
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  /// A copy whose graph also computes d(output 0)/d(param) for `params` (default: every parameter
  /// the function read); calling it fills their grad() like eager backward().
  /// With `loss_scale` (a 0-d Var of the loss's dtype: GradScaler::scale_var()), the backward starts
  /// from its value instead of 1, read at each call like a parameter, so every gradient comes out
  /// multiplied by it (the actor runtime divides it out again; ProgramOptions::loss_scaler).
  TracedFunction with_gradients(const std::vector<Var>& params = {}, const Var& loss_scale = Var()) const;
  /// A pipeline stage's training step from a traced stage_forward() (graph/pipeline_stage.hpp, the
  /// same `channels`, autocast and optimized): d(output 0)/d(parameters) and d(output 0)/d(the
  /// received input), the backward starting from the gradient received on gradient_in (from 1, or `loss_scale`, on the
  /// last stage, whose output 0 is the loss). Output 0 goes out on activation_out and the received
  /// input's gradient on gradient_out. Its own outputs: the loss on the last stage, else the
  /// send's token; then the token of the gradient's send unless first; then the parameters'
  /// gradients, as with_gradients() orders them.
  TracedFunction with_stage_gradients(const StageChannels& channels, const Var& loss_scale = Var()) const;
  /// A copy whose graph went through the pass pipeline of JIT level `level` (graph/passes.hpp):
  /// the same signature and results (bit for bit at level 2; level 3 fuses) with less work. Level
  /// 3 also plans memory: each input shape gets an arena (arena_layouts.hpp) after its first call,
  /// and elementwise ops write over inputs that die at them. For
  /// training, run it before with_gradients (fusion rewrites forward chains, and autodiff then
  /// takes the fused ops' gradients) and again after (the passes see forward and backward together).
  TracedFunction optimized(int level) const;
  /// A copy whose graph runs at mixed-precision level `amp` (graph/amp.hpp; O0 changes nothing).
  /// For training, run it first, before optimized() and with_gradients(): the gradients then
  /// follow the casts (the products' gradients in low precision, the parameters' in f32).
  TracedFunction with_amp(const AmpOptions& amp) const;
  /// A copy for inference only: its graph without custom-gradient regions and gradient overrides
  /// (Graph::inference_graph; the forward computation is unchanged), so fusion sees through a
  /// custom_relu. with_gradients() on it is refused. Jit uses it when no gradients are asked for.
  TracedFunction for_inference() const;
  /// A copy that runs `graph` with `signature` on `parameters` (in the order of its parameters): the
  /// same outputs and gradients in the same order, computed otherwise (a device's part of a sharded
  /// step, graph/spmd.hpp). Memory plans are per graph, so it plans none until optimized(3).
  TracedFunction with_graph(std::shared_ptr<const Graph> graph, std::vector<InputSpec> signature,
                            std::vector<Var> parameters) const;
  /// True when calls run in planned arenas (level 3, unless TROUPE_DISABLE_PASSES names memory-planning).
  bool plans_memory() const { return memory_ != nullptr; }
  /// Planned and measured peaks of the latest input shape (throws unless plans_memory()).
  MemoryPlanReport memory_report() const;
  /// The recorded graph.
  const Graph& graph() const { return *graph_; }
  /// The signature it was traced with, dims resolved to symbols.
  const std::vector<InputSpec>& signature() const { return signature_; }
  /// The eager parameters, in the order of graph().parameters().
  const std::vector<Var>& parameters() const { return parameters_; }
  /// How many graph outputs are the function's own; the rest are gradients.
  std::size_t output_count() const { return outputs_; }
  /// True when the backward starts from a gradient received from the next pipeline stage
  /// (with_stage_gradients, a stage before the last): a loss scale the last stage seeds with
  /// reaches it in that gradient.
  bool backward_received() const { return backward_received_; }
  /// The index among parameters() of the loss scale with_gradients() seeded the backward with, or -1.
  int loss_scale_parameter() const { return loss_scale_; }
  /// For each gradient output (graph output output_count() + k), the index of its parameter.
  const std::vector<std::size_t>& gradient_parameters() const { return grad_parameters_; }

 private:
  friend TracedFunction trace(const TraceableFn& fn, const std::vector<InputSpec>& signature);
  // The loss scale as a new parameter of `g` (this function's graph, copied), which the backward
  // starts from; -1 without one.
  ValueId add_loss_scale(Graph& g, const Var& loss_scale);
  // Appends to `g` the gradients of value `loss` (from `seed`, or 1) for `params` (every parameter
  // read when empty), which follow `outputs` in parameter order, and those of the `extra` values,
  // which it returns (-1 where the loss does not depend on one).
  std::vector<ValueId> append_gradients(Graph& g, const std::vector<Var>& params, ValueId loss, ValueId seed,
                                        const std::vector<ValueId>& extra, std::vector<ValueId>& outputs);
  std::shared_ptr<const Graph> graph_;
  std::vector<InputSpec> signature_;
  std::vector<Var> parameters_;
  std::size_t outputs_ = 0;                   // the function's own outputs; gradients follow them
  std::vector<std::size_t> grad_parameters_;  // parameter index of each gradient output
  int loss_scale_ = -1;                        // parameter index of the backward's seed, or -1
  bool backward_received_ = false;             // with_stage_gradients before the last stage
  std::shared_ptr<ArenaLayoutCache> memory_;    // level 3: the arenas, one per input shape
  bool inference_ = false;                     // for_inference(): no gradients may be added
};

/// Traces `fn` against `signature`. Errors in shapes are raised here, naming the op.
TracedFunction trace(const TraceableFn& fn, const std::vector<InputSpec>& signature);

/// The JIT_LEVEL environment switch: 0 runs eagerly, >= 1 traced (levels 2-3 enable graph passes).
/// Unset means 3; anything but an integer 0..3 is an error saying so.
int jit_level();

/// Conditional jit: runs `fn` eagerly when the level is 0 and as a traced graph otherwise (through
/// the level's pass pipeline), with the same results. With `gradients`, each call also fills the grad() of the parameters that output 0
/// depends on (eager backward() or a traced backward), so a training step can switch freely.
class Jit {
 public:
  /// Traces now unless `level` is 0.
  /// At an `amp` level above O0 the traced graph is autocast first (an error at level 0).
  Jit(TraceableFn fn, std::vector<InputSpec> signature, bool gradients = false, int level = jit_level(),
      AmpOptions amp = {});
  /// Runs the function on `inputs`.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  /// True when calls run the traced graph.
  bool traced() const { return traced_ != nullptr; }
  /// The traced function (throws in eager mode).
  const TracedFunction& traced_function() const;

 private:
  TraceableFn fn_;
  std::vector<InputSpec> signature_;
  bool gradients_;
  std::shared_ptr<TracedFunction> traced_;
};

}  // namespace troupe::graph
