#pragma once
// One definition per op (the discipline of ATen's native_functions): symbolic shape/dtype
// inference, the kernel it runs, and the gradient rule written as more ops. Eager mode, tracing,
// autodiff and the runtime all read the same OpDef.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "troupe/graph/collectives.hpp"
#include "troupe/graph/graph.hpp"
#include "troupe/graph/sharding.hpp"
#include "troupe/graph/var.hpp"
#include "troupe/kernels/dropout.hpp"

namespace troupe::graph {

/// What shape inference sees of a node being built.
struct InferContext {
  const std::string& op;
  const std::vector<ValueInfo>& inputs;
  const Attrs& attrs;
  const SymShape& target;
};

/// What the computation of a node gets besides its input tensors: the attributes and the concrete
/// output shapes (inferred, then bound) and dtypes, so reshape-like ops need no symbolic logic at
/// run time and kernel calls can allocate their outputs.
struct ComputeContext {
  const Attrs& attrs;
  const std::vector<Shape>& output_shapes;
  const std::vector<DType>& output_dtypes;
  const std::string& label;
  kernels::RandomPosition random = {};  // where random ops draw (dropout): the step, micro-batch and replica
};

/// Shape/dtype inference: the outputs' infos, or a troupe::Error naming op, inputs and the rule.
using InferFn = std::vector<ValueInfo> (*)(const InferContext& ctx);

/// What an op's cost rule sees: its inputs' and outputs' shapes at given sizes, and its attributes.
struct CostContext {
  const std::vector<Shape>& inputs;
  const std::vector<Shape>& outputs;
  const Attrs& attrs;
};
/// The work of one run of an op at given sizes, in floating-point operations (a product's 2 m n k)
/// or, for ops bound by memory, the elements they touch: what the planner's cost model adds up.
using CostFn = double (*)(const CostContext& ctx);
/// A computation written by hand: output tensors from input tensors (views, and kernel calls that
/// need their inputs reshaped or their attributes translated).
using ComputeFn = std::vector<Tensor> (*)(const std::vector<Tensor>& inputs, const ComputeContext& ctx);
/// A collective op's computation: prepares its call (collectives.hpp) from the inputs, on the
/// caller's thread.
using CollectiveFn = CollectiveCall (*)(const std::vector<Tensor>& inputs, const ComputeContext& ctx);
/// A gradient rule: one Var per input (undefined where no gradient flows), built from ops.
using GradFn = std::function<std::vector<Var>(const GradContext& ctx)>;

/// What mixed precision (graph/amp.hpp) does with an op that is not a product (autocast_inputs).
enum class Precision {
  follows,    // runs in its inputs' dtype
  keeps_f32,  // losses, softmax, normalisation, reductions, exp/log: f32 at O1 and O2 (bf16 inputs
              // go up), bf16 or f16 at O3 (their kernels compute rows in f32)
  f32,        // f32 at every level: it has no bf16 or f16 kernel
};

/// The definition of an op, written with designated initialisers in the op's family file
/// (graph/src/ops/), next to its builder:
///   TROUPE_DEFINE_OP({.name = "bias_gelu", .infer = infer_bias_gelu, .sharding = shard_pointwise,
///                     .kernel = "bias_gelu", .grad = grad_bias_gelu, .in_place = true});
/// An op runs `kernel`, the name of a kernel in the kernel registry (dispatched on the inputs'
/// device and dtype, with the node's attributes, into outputs allocated from the inferred shapes and
/// dtypes), or `compute`, or `collective`; exactly one is set. `kernel` is for kernels that take their inputs as they
/// come (any strides, broadcast views) and the node's attributes unchanged; a kernel that wants
/// dense inputs or other attributes is reached through its front end in a `compute`.
struct OpDef {
  const char* name = nullptr;        // the op's one name, as builders and graphs spell it
  InferFn infer = nullptr;           // shape and dtype rule, run when a node is built
  CostFn cost = nullptr;             // its work at given sizes (op_cost); null: elements_touched
  ShardFn sharding = nullptr;        // the signatures it runs under on a mesh axis besides all-broadcast
                                     // (graph/sharding.hpp); null: replicated only
  const char* kernel = nullptr;      // the registry kernel this op dispatches, or null
  ComputeFn compute = nullptr;       // hand-written computation, or null
  CollectiveFn collective = nullptr; // a collective: meets the other devices of its group (graph/spmd.hpp),
                                     // so every device must run these ops' acts in one order; null otherwise
  bool point_to_point = false;       // a collective between two devices on a channel of its own (a pipeline's
                                     // send or receive): its acts keep their micro-batches' order alone,
                                     // outside the one order of the other collectives
  GradFn grad;                       // empty: not differentiable (autodiff says so if a gradient must pass)
  std::vector<int> no_grad_inputs;   // inputs that never get a gradient (ids, targets, shape sources)
  bool host_reads = false;           // its computation reads input values on the host (a range check of
                                     // ids, a norm it returns as a number): a stream-ordered program runs
                                     // it on the host once its inputs are complete (troupe/kernels/stream.hpp)
  bool side_effects = false;         // runs for an effect besides its outputs (printing): graph passes
                                     // never remove, merge or fold such a node
  bool in_place = false;             // kernel op computing output 0 elementwise: it may be written over
                                     // an input of its shape and dtype (the executor's buffer reuse)
  int in_place_input = -1;           // with in_place: the one input output 0 may take (-1: any), for a
                                     // kernel that reads its other inputs after writing (a conv's residual)
  std::vector<int> autocast_inputs;  // the inputs mixed precision runs in bf16 or f16 (a product's
                                     // operands, not its bias), writing the result in f32 at O1 and in the
                                     // low dtype at O2 ("out_dtype"); graph/amp.hpp
  Precision precision = Precision::follows;  // what mixed precision does with an op that is not a product
  /// True when a gradient can flow into input `i`.
  bool differentiable(std::size_t i) const;
  /// True when its cost rule counts arithmetic (products, convolutions, attention) rather than the
  /// elements it touches: the ops whose time grows faster than the memory they read.
  bool counts_arithmetic() const;
  /// Runs the op on tensors, its kernel, compute function or collective (waiting for the wire), and
  /// checks the outputs against the context's shapes and dtypes: the one way eager mode and the
  /// executor run an op, and op actors run all but collectives.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const ComputeContext& ctx) const;
  /// A collective op's call, whose `finish` checks the outputs as run() does: how op actors run a
  /// collective without waiting for the wire.
  CollectiveCall start(const std::vector<Tensor>& inputs, const ComputeContext& ctx) const;
  /// Runs an in_place op like run() with output 0 written over inputs[input], which must be
  /// dense and of output 0's shape and dtype, and which nothing may read afterwards.
  std::vector<Tensor> run_in_place(const std::vector<Tensor>& inputs, const ComputeContext& ctx, std::size_t input) const;
};

/// The cost rule of an op that only moves, views or relabels values (OpDef::cost): no work counted.
double moves_only(const CostContext& ctx);
/// The default cost rule: the elements an op touches, the larger of its biggest input and its first output.
double elements_touched(const CostContext& ctx);
/// The work of `node` of `g` at `bindings`' sizes: its OpDef's cost rule, or elements_touched.
double op_cost(const Graph& g, const Node& node, const SymBindings& bindings);

/// A gradient rule that fails with an error naming `op`: for ops without a rule of their own that
/// lie on a path autodiff must cross (second-order gradients, for example).
GradFn missing_gradient(const std::string& op);

/// All op definitions, filled at load time.
class OpRegistry {
 public:
  /// The process-wide registry.
  static OpRegistry& instance();
  /// Adds a definition; the same name twice is a programming error and throws.
  void add(OpDef def);
  /// The definition of `op`; throws naming the op and listing similar ones if absent.
  const OpDef& get(const std::string& op) const;
  /// Names of all ops, sorted.
  std::vector<std::string> names() const;
  /// Registers a named gradient rule usable as an override (GradientOverride).
  void add_gradient(const std::string& name, GradFn fn);
  /// The named gradient rule; throws if unknown.
  const GradFn& gradient(const std::string& name) const;
  /// True when a gradient rule called `name` is registered (the graph checker asks).
  bool has_gradient(const std::string& name) const { return gradients_.count(name) != 0; }

 private:
  OpRegistry() = default;
  std::map<std::string, OpDef> ops_;
  std::map<std::string, GradFn> gradients_;
};

/// Registers an OpDef at load time from the file that defines it.
struct OpRegistrar {
  explicit OpRegistrar(OpDef def) { OpRegistry::instance().add(std::move(def)); }
};

/// Registers the OpDef whose fields follow (designated initialisers) at load time: the one way an op
/// is defined.
#define TROUPE_DEFINE_OP(...)                                                                    \
  static const ::troupe::graph::OpRegistrar TROUPE_CONCAT(troupe_op_registrar_, __COUNTER__)( \
      ::troupe::graph::OpDef __VA_ARGS__)

/// Registers a named gradient rule at load time.
struct GradientRegistrar {
  GradientRegistrar(const std::string& name, GradFn fn) { OpRegistry::instance().add_gradient(name, std::move(fn)); }
};

}  // namespace troupe::graph
