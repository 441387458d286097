#pragma once
// The one way a pass builds its result: the source graph is copied node by node, in order, into a
// fresh graph through a map from old values to new ones. A pass copies a node, drops it, maps its
// outputs to values that already exist, or emits other nodes in its place. Building through
// Graph::add_node re-runs every op's inference, and the signature (inputs, parameters, outputs)
// carries over unchanged, so a TracedFunction's parameter and gradient bookkeeping stays valid.

#include <functional>
#include <vector>

#include "troupe/graph/graph.hpp"

namespace troupe::graph::passes {

/// Copies a graph into a new one node by node; see the file comment.
class Rewriter {
 public:
  /// Starts the copy of `src` with its inputs and parameters, in order.
  explicit Rewriter(const Graph& src);
  /// The new value standing for old value `v`; constants are copied on first use, so constants
  /// nobody reads are dropped.
  ValueId map(ValueId v);
  /// The new values standing for `vs`.
  std::vector<ValueId> map(const std::vector<ValueId>& vs);
  /// Copies old node `n` with mapped inputs, keeping attributes, target, label, gradient override,
  /// backward flag and custom-gradient region.
  NodeId copy(const Node& n);
  /// Appends a node in place of old node `n` (its flags and region) and maps n's outputs to its
  /// first outputs, which must have the same infos (a pass that breaks this throws); outputs
  /// beyond n's (a fused op's saved statistics) are new values.
  NodeId emit_for(const Node& n, const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs,
                  const SymShape& target = {});
  /// Like emit_for, with the new node's first outputs standing for old values `olds` instead of
  /// n's outputs: for a fusion whose node also gives a value an absorbed producer made.
  NodeId emit_standing_for(const Node& n, const std::vector<ValueId>& olds, const std::string& op,
                           const std::vector<ValueId>& inputs, const Attrs& attrs, const SymShape& target = {});
  /// Appends a node of the pass's own, standing for no old value (a recomputation), with the
  /// flags and region of old node `next`, the node it is placed before; returns its outputs.
  std::vector<ValueId> emit_before(const Node& next, const std::string& op, const std::vector<ValueId>& inputs,
                                   const Attrs& attrs);
  /// Like emit_for, for a node whose outputs hold n's values in another layout, so another shape
  /// (layout choice): none of n's outputs may be a graph output, whose info must not change.
  NodeId emit_relaid_for(const Node& n, const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs);
  /// Like emit_for, for a node whose outputs may have other dtypes than n's (a precision pass): each
  /// of n's outputs maps to the new output of its position; a graph output whose dtype changed maps
  /// to a cast of it back to the old dtype, so the signature never changes.
  NodeId emit_retyped_for(const Node& n, const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs);
  /// True when old value `v` may stand for new value `to`: the infos are equal, and when `v` is a
  /// graph output, `to` is an op output no other graph output stands for yet (so outputs never
  /// alias an input, a parameter, a constant or each other, whatever the caller does with them).
  bool can_replace(ValueId v, ValueId to) const;
  /// Makes old value `v` stand for new value `to`; requires can_replace.
  void replace(ValueId v, ValueId to);
  /// Adds a constant to the new graph.
  ValueId constant(const Tensor& t);
  /// The graph built so far (passes look at the new producers of mapped values).
  const Graph& result() const { return out_; }
  /// Closes the open region, adds the outputs and returns the new graph.
  Graph finish();

 private:
  void enter_region(int old_region);
  void claim(ValueId old_value, ValueId new_value);
  const Graph& src_;
  Graph out_;
  std::vector<ValueId> map_;           // old value -> new value, -1 until mapped
  std::vector<bool> is_output_;        // old value is a graph output
  std::vector<bool> claimed_;          // new value already stands for a graph output
  int open_old_ = -1, open_new_ = -1;  // the region being copied, old and new index
};

/// True when old node `n` may be rewritten away (folded, simplified): no side effects, outside
/// custom-gradient regions, without a gradient override, so no rewrite changes which gradient rule
/// applies if the graph is differentiated later.
bool rewritable(const Node& n);

/// The forward node running `op` that makes `v`, when v is an op output read by exactly `uses`
/// readers (as reader_counts counts them) and the node may be rewritten; else null: one link of a
/// chain a forward fusion absorbs.
const Node* sole_producer(const Graph& g, ValueId v, const std::vector<int>& readers, const char* op, int uses = 1);

/// How many readers each value of `g` has: node inputs (a node reading it twice counts twice) and
/// graph outputs. Fusions use it to see that a chain's values have no reader outside the chain.
std::vector<int> reader_counts(const Graph& g);

/// True when value `v` of `g` is known, from how it is computed, to be a dense row-major tensor at
/// run time: the output of a kernel op (freshly allocated) or a reshape of such a value. Rewrites
/// that hand a consumer another tensor than the one it read require this, so the consumer sees
/// exactly the strides it saw before and computes exactly the same bits.
bool known_dense(const Graph& g, ValueId v);

/// Which producer node `n` absorbs in a two-node fusion (null: none), given each value's reader count.
using PairMatch = std::function<const Node*(const Graph& g, const Node& n, const std::vector<int>& readers)>;
/// Emits the fused node in place of consumer `n` and its absorbed `producer`.
using PairEmit = std::function<void(Rewriter& r, const Node& n, const Node& producer)>;

/// The skeleton of the two-node fusions (bias-gelu, conv-relu): every node that `match` pairs with
/// a producer becomes what `emit` writes in its place, and the producer is dropped.
Graph fuse_pairs(const Graph& g, const PairMatch& match, const PairEmit& emit);

}  // namespace troupe::graph::passes
