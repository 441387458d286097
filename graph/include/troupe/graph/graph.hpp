#pragma once
// The IR: a Graph owns Values (typed, symbolically shaped edges) and Nodes (one op application
// each). Nodes are appended in execution order, so the node list is always a valid schedule.
// Building a node runs its OpDef's shape/dtype inference: a bad graph is rejected at build time.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/graph/sym_shape.hpp"
#include "troupe/kernels/registry.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::graph {

class Var;
struct GradContext;

/// Index of a Value in its Graph.
using ValueId = int;
/// Index of a Node in its Graph.
using NodeId = int;

/// Where a value comes from.
enum class ValueKind { input, parameter, constant, op_output };

/// Element type and symbolic shape of a value: what shape inference computes.
struct ValueInfo {
  DType dtype = DType::f32;
  SymShape shape;
};

/// An edge of the graph.
struct Value {
  ValueId id = -1;
  ValueKind kind = ValueKind::op_output;
  ValueInfo info;
  std::string name;       // parameter or input name; empty for op outputs
  NodeId producer = -1;   // for op outputs
  int output_index = 0;   // which output of the producer
  Tensor constant;        // for constants
};

/// One op application.
struct Node {
  NodeId id = -1;
  std::string op;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  Attrs attrs;
  SymShape target;        // target shape of reshape-like ops; empty otherwise
  std::string label;      // free text (debug_print name); shown in dumps
  std::string gradient;   // name of a registered gradient overriding the op's own rule; empty = default
  int region = -1;        // custom-gradient region this node belongs to, or -1
  bool backward = false;  // emitted by autodiff
};

/// The user-supplied backward of a custom-gradient region: input gradients from the context.
using RegionBackward = std::function<std::vector<Var>(const GradContext&)>;

/// A subgraph whose gradient is given by a callable instead of its nodes' own rules.
struct CustomRegion {
  std::string name;
  std::vector<ValueId> inputs, outputs;
  NodeId first = 0, last = -1;  // its nodes are exactly [first, last]
  RegionBackward backward;
};

/// A dataflow graph: inputs, parameters and constants feed nodes; some values are outputs.
class Graph {
 public:
  /// Adds a graph input (a traced function's argument).
  ValueId add_input(const std::string& name, ValueInfo info);
  /// Adds a named parameter (trainable state read at run time).
  ValueId add_parameter(const std::string& name, ValueInfo info);
  /// Adds a constant embedded in the graph.
  ValueId add_constant(const Tensor& value);
  /// Appends a node after inferring its outputs; throws (naming op and shapes) if inputs do not fit.
  NodeId add_node(const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs = {},
                  const SymShape& target = {});
  /// Marks `v` as a graph output.
  void add_output(ValueId v) { outputs_.push_back(v); }
  /// Replaces the outputs (a pipeline stage's step keeps its sends' tokens, not the values sent).
  void set_outputs(std::vector<ValueId> outputs) { outputs_ = std::move(outputs); }
  /// Opens a custom-gradient region at the next node; returns its index.
  int begin_region(const std::string& name, const std::vector<ValueId>& inputs);
  /// Closes region `r` with its outputs and backward.
  void end_region(int r, const std::vector<ValueId>& outputs, RegionBackward backward);

  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<CustomRegion>& regions() const { return regions_; }
  /// One value / node by id.
  const Value& value(ValueId v) const { return values_.at(static_cast<std::size_t>(v)); }
  const Node& node(NodeId n) const { return nodes_.at(static_cast<std::size_t>(n)); }
  /// Mutable node access (passes set gradient overrides and flags).
  Node& mutable_node(NodeId n) { return nodes_.at(static_cast<std::size_t>(n)); }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& parameters() const { return parameters_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  /// The parameter value called `name`, or -1.
  ValueId find_parameter(const std::string& name) const;
  /// Readable dump: one line per value source and per node, shapes included.
  std::string dump() const;
  /// The same graph without backward nodes, gradient overrides and custom-gradient regions: what
  /// inference and export see (a custom_relu model exports a plain relu).
  Graph inference_graph() const;

 private:
  ValueId new_value(ValueKind kind, ValueInfo info, const std::string& name);
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<CustomRegion> regions_;
  std::vector<ValueId> inputs_, parameters_, outputs_;
  int open_region_ = -1;
};

}  // namespace troupe::graph
