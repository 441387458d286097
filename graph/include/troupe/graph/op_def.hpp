#pragma once
// One definition per op (the discipline of ATen's native_functions): symbolic shape/dtype
// inference, the computation on tensors (the kernel it lowers to), and the gradient rule written
// as more ops. Eager mode, tracing, autodiff and the runtime all read the same OpDef.

#include <functional>
#include <string>
#include <vector>

#include "troupe/graph/graph.hpp"
#include "troupe/graph/var.hpp"

namespace troupe::graph {

/// What shape inference sees of a node being built.
struct InferContext {
  const std::string& op;
  const std::vector<ValueInfo>& inputs;
  const Attrs& attrs;
  const SymShape& target;
};

/// What the computation of a node gets besides its input tensors: the attributes and the concrete
/// output shapes (inferred, then bound), so reshape-like ops need no symbolic logic at run time.
struct ComputeContext {
  const Attrs& attrs;
  const std::vector<Shape>& output_shapes;
  const std::string& label;
};

/// Shape/dtype inference: the outputs' infos, or a troupe::Error naming op, inputs and the rule.
using InferFn = std::vector<ValueInfo> (*)(const InferContext& ctx);
/// The computation: output tensors from input tensors.
using ComputeFn = std::vector<Tensor> (*)(const std::vector<Tensor>& inputs, const ComputeContext& ctx);
/// A gradient rule: one Var per input (undefined where no gradient flows), built from ops.
using GradFn = std::function<std::vector<Var>(const GradContext& ctx)>;

/// The definition of an op.
struct OpDef {
  std::string name;
  std::string kernel;  // registry kernel(s) it lowers to, for dumps and docs ("matmul", "-" if a view)
  InferFn infer = nullptr;
  ComputeFn compute = nullptr;
  GradFn grad;  // empty: the op is not differentiable (autodiff says so if a gradient must pass)
  std::vector<int> nondiff_inputs;  // inputs that never get a gradient (ids, targets, shape sources)
  /// True when a gradient can flow into input `i`.
  bool differentiable(std::size_t i) const;
};

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

 private:
  OpRegistry() = default;
  std::map<std::string, OpDef> ops_;
  std::map<std::string, GradFn> gradients_;
};

/// Registers an OpDef at load time from the file that defines it.
struct OpRegistrar {
  explicit OpRegistrar(OpDef def) { OpRegistry::instance().add(std::move(def)); }
};

/// Registers a named gradient rule at load time.
struct GradientRegistrar {
  GradientRegistrar(const std::string& name, GradFn fn) { OpRegistry::instance().add_gradient(name, std::move(fn)); }
};

}  // namespace troupe::graph
