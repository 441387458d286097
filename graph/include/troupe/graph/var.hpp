#pragma once
// Var: the handle every builder function takes and returns. In eager mode it holds a tensor (and,
// when gradients are recorded, its place on the tape); while tracing, or inside autodiff, it names a
// Value of a Graph. The same model code therefore runs eagerly and builds graphs.

#include <memory>
#include <string>
#include <vector>

#include "troupe/graph/graph.hpp"

namespace troupe::graph {

struct TapeEntry;

/// Shared state behind a Var.
struct VarImpl {
  Tensor value;                    // eager value
  Graph* graph = nullptr;          // symbolic: the graph and value id
  ValueId id = -1;
  ValueInfo info;                  // dtype and (symbolic) shape, for both kinds
  bool requires_grad = false;      // a leaf whose gradient backward() accumulates
  std::shared_ptr<TapeEntry> producer;  // eager op that made it, when recorded
  int output_index = 0;
  Tensor grad;                     // accumulated gradient of a leaf
  std::string name;                // parameter name (dotted), empty otherwise
};

/// A tensor handle in eager mode, or a graph value while tracing.
class Var {
 public:
  Var() = default;
  /// An eager value that needs no gradient (data, constants).
  Var(const Tensor& t);  // NOLINT: implicit, so tensors pass where Vars are expected
  /// An eager leaf whose gradient backward() accumulates; `name` is its parameter name.
  static Var leaf(const Tensor& t, const std::string& name = "");
  /// A symbolic value `id` of `graph`.
  static Var symbolic(Graph* graph, ValueId id);

  /// True when the handle refers to something.
  bool defined() const { return impl_ != nullptr; }
  /// True when this names a graph value rather than holding a tensor.
  bool is_symbolic() const { return impl_ && impl_->graph; }
  /// The eager tensor; throws if symbolic.
  const Tensor& tensor() const;
  /// Replaces an eager leaf's tensor by `t` of its shape and dtype, or by nothing (an undefined
  /// tensor: its memory released; a tensor-parallel rank holds only its shards between evaluations).
  void set_value(const Tensor& t) const;
  /// Element type.
  DType dtype() const { return impl().info.dtype; }
  /// Symbolic shape (all static in eager mode).
  const SymShape& shape() const { return impl().info.shape; }
  /// Rank.
  int dim() const { return static_cast<int>(shape().size()); }
  /// Size of dimension `axis` (negative counts from the end).
  SymDim size(std::int64_t axis) const;
  /// The graph and value of a symbolic Var.
  Graph* graph() const { return impl().graph; }
  ValueId id() const { return impl().id; }
  /// Parameter name, or empty.
  const std::string& name() const { return impl().name; }
  /// True for leaves whose gradient is accumulated.
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  /// The accumulated gradient of a leaf (undefined before backward()).
  const Tensor& grad() const { return impl().grad; }
  /// Replaces the accumulated gradient (optimizers, gradient clipping, traced steps).
  void set_grad(const Tensor& g) const { impl().grad = g; }
  /// Forgets the accumulated gradient.
  void zero_grad() const { impl().grad = Tensor(); }
  /// Identity of the underlying handle (two Vars of one parameter compare equal).
  const VarImpl* key() const { return impl_.get(); }
  /// The shared state; for the tape and the tracer.
  VarImpl& impl() const;

  /// Reshape to `shape` (one -1 may be inferred); a view when the layout allows.
  Var reshape(const SymShape& shape) const;
  /// Swaps two dimensions (a view).
  Var transpose(std::int64_t a, std::int64_t b) const;
  /// Reorders dimensions (a view).
  Var permute(const std::vector<std::int64_t>& dims) const;

 private:
  std::shared_ptr<VarImpl> impl_;
};

/// What a gradient rule sees: the node's inputs, outputs, the gradients arriving at the outputs
/// (undefined where none arrived), attributes, and which inputs need a gradient.
struct GradContext {
  std::vector<Var> inputs;
  std::vector<Var> outputs;
  std::vector<Var> grad_outputs;
  const Attrs& attrs;
  const SymShape& target;
  std::vector<bool> needs_grad;
  std::string label = {};  // the traced node's label (debug_print's name); empty on the eager tape
  /// The gradient of output `i`, or zeros of its shape when none arrived.
  Var grad_output(std::size_t i) const;
};

/// Applies op `op` to `inputs`: runs it now (eager) or appends a node (tracing / symbolic inputs).
std::vector<Var> apply(const std::string& op, const std::vector<Var>& inputs, const Attrs& attrs = {},
                       const SymShape& target = {}, const std::string& label = "");
/// apply() for single-output ops.
Var apply1(const std::string& op, const std::vector<Var>& inputs, const Attrs& attrs = {},
           const SymShape& target = {}, const std::string& label = "");

/// While alive, eager ops record no tape (inference, optimizer steps, gradient rules).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
/// True when eager ops currently record a tape.
bool grad_enabled();

/// While alive, nodes of op `op` built on this thread use the registered gradient `gradient`
/// instead of their own rule (forward unchanged).
class GradientOverride {
 public:
  GradientOverride(const std::string& op, const std::string& gradient);
  ~GradientOverride();
  GradientOverride(const GradientOverride&) = delete;
  GradientOverride& operator=(const GradientOverride&) = delete;

 private:
  std::string op_, previous_;
  bool had_previous_;
};
/// The gradient override active for `op` on this thread, or empty.
std::string active_gradient_override(const std::string& op);

}  // namespace troupe::graph
