#pragma once
// Sharding a graph over a mesh of devices, in OneFlow's SBP terms. Along each axis of the mesh a
// value is split along one of its dims (each device holds a slice), broadcast (each holds all of it)
// or a partial sum (the devices' tensors add up to it). Each op declares, next to its shape rule,
// the signatures it can run under along one axis (OpDef::sharding): matmul's row, column and
// inner-dim splits, elementwise ops following their inputs, sums producing partial sums. Every op
// can also run replicated, all broadcast. propagate_sharding() (troupe/plan/propagation.hpp) gives every value of a graph its
// placement from those of the parameters and inputs, choosing for each node the signature whose
// input transitions move the fewest bytes, and lists the collectives those transitions are:
// P->B all-reduce, P->S reduce-scatter, S->B all-gather, S->S all-to-all, B->S and B->P local.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "troupe/graph/graph.hpp"
#include "troupe/graph/sym_shape.hpp"

namespace troupe::graph {

/// A value's layout along one mesh axis.
struct Placement {
  enum class Kind { broadcast, split, partial_sum };
  Kind kind = Kind::broadcast;
  int dim = 0;     // split: the value's dim divided among the axis's devices
  int blocks = 1;  // split: the dim is `blocks` equal blocks, each split among the devices (device r
                   // holds slice r of every block, in block order): Megatron's fused qkv rows
                   // grouped by head, so that a device holds its heads' q, k and v

  /// Every device holds the whole value.
  static Placement broadcast() { return {}; }
  /// Each device holds a contiguous slice of the value along `dim`, or of each of its `blocks`.
  static Placement split(int dim, int blocks = 1) { return {Kind::split, dim, blocks}; }
  /// The devices' values add up to the value.
  static Placement partial_sum() { return {Kind::partial_sum, 0, 1}; }
  bool operator==(const Placement& o) const {
    return kind == o.kind && (kind != Kind::split || (dim == o.dim && blocks == o.blocks));
  }
  bool operator!=(const Placement& o) const { return !(*this == o); }
  /// "B", "S(1)", "S(0)x3" (3 blocks) or "P".
  std::string str() const;
};

/// A value's placement along each mesh axis, in the mesh's order.
using NdPlacement = std::vector<Placement>;
/// "(S(0), B)".
std::string placement_str(const NdPlacement& p);
/// {"S(0)", "B"}: one string per mesh axis, as plans and strategy files write them in JSON.
std::vector<std::string> placement_strings(const NdPlacement& p);

/// A mesh of devices: its named axes and their sizes, e.g. {{"dp", 2}, {"tp", 2}}; device d has
/// coordinates in row-major order (the last axis varies fastest).
struct Mesh {
  std::vector<std::pair<std::string, int>> axes;
  /// Devices in the mesh (the product of the axes' sizes).
  int devices() const;
  /// "dp=2 x tp=2".
  std::string str() const;
  /// The index of the axis called `name`, or -1.
  int axis(const std::string& name) const;
};

/// One device's graph as a sharded step's lowering builds it (graph/spmd.hpp), for the ops whose
/// signature along a mesh axis runs as more than the op on the device's slices
/// (ShardSignature::expand): their devices need each other's values, or their slice's offset.
class LocalGraph {
 public:
  virtual ~LocalGraph() = default;
  /// Adds `op` on local values (attributes as the op reads them locally); its outputs.
  virtual std::vector<ValueId> add(const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs) = 0;
  /// A local value's dtype and shape (its slice's).
  virtual const ValueInfo& info(ValueId v) const = 0;
  /// `x` summed over the axis's devices (an all-reduce).
  virtual ValueId all_reduce(ValueId x) = 0;
  /// The devices' `x`, joined along `dim` in device order (an all-gather).
  virtual ValueId all_gather(ValueId x, int dim) = 0;
  /// This device's index along the axis.
  virtual int index() const = 0;
  /// The axis's device count.
  virtual int devices() const = 0;
};

/// Builds one device's part of a node along one axis on `g`: `inputs` are the node's local
/// values placed as the signature says, `attrs` its attributes; returns its local outputs.
using ExpandFn = std::vector<ValueId> (*)(LocalGraph& g, const std::vector<ValueId>& inputs, const Attrs& attrs);

/// One way an op can run along a mesh axis: the placement of each input and of each output.
struct ShardSignature {
  std::vector<Placement> inputs, outputs;
  /// The op averages over the dim that is split (a mean, a cross-entropy over rows, their
  /// gradients): each device's result counts only its own rows, so the runtime divides it by the
  /// axis's device count (the split being even) to make it its share.
  bool mean_of_split = false;
  /// Along this axis the op runs as what `expand` builds rather than as itself on its slices
  /// (Megatron's vocab-parallel embedding and cross-entropy); null: as itself.
  ExpandFn expand = nullptr;
  /// The collectives `expand` runs, each on a value of the rows' size: the planner counts their latency.
  int expand_collectives = 0;
};

/// What an op's sharding rule sees of a node.
struct ShardContext {
  const std::string& op;
  const std::vector<ValueInfo>& inputs;
  const std::vector<ValueInfo>& outputs;
  const Attrs& attrs;
  const std::vector<Placement>& current;  // each input's placement along the axis so far, for rules that
                                          // let a blocked split through (Placement::blocks)
};

/// An op's sharding rule: the signatures it can run under besides all-broadcast (which every op
/// has), in order of preference.
using ShardFn = std::vector<ShardSignature> (*)(const ShardContext& ctx);

/// The communication a change of placement needs along one mesh axis.
enum class Collective {
  none,            // the placements agree
  all_reduce,      // P -> B
  reduce_scatter,  // P -> S
  all_gather,      // S -> B
  all_to_all,      // S(i) -> S(j)
  local,           // B -> S (keep a slice), B -> P (keep it on one device), S -> P (zeros elsewhere)
};
/// "all-reduce", "reduce-scatter", ...
const char* to_string(Collective c);
/// The collective that takes a value from `from` to `to` along one axis; an error for P -> P of
/// another kind (none exists).
Collective collective_between(const Placement& from, const Placement& to);
/// The bytes each device sends for `c` on a value of `bytes` bytes over `devices` devices (ring
/// algorithms): all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n, all-to-all (n-1)/n^2 of
/// the value, local 0.
double collective_bytes(Collective c, double bytes, int devices);

/// A change of placement the plan inserts: where a value meets a consumer that needs it placed
/// otherwise, along one mesh axis (consumer -1: the value itself, pinned or a required output).
/// A value brought to a placement once serves every later consumer that needs it so.
struct Transition {
  ValueId value = -1;
  NodeId consumer = -1;
  int input = 0;      // which input of the consumer
  int mesh_axis = 0;
  Placement from, to;
  Collective collective = Collective::none;
  double bytes = 0;   // sent per device
};

/// Every value's placement, each node's chosen signature per mesh axis, and the transitions.
struct GraphPlacement {
  Mesh mesh;
  std::map<ValueId, NdPlacement> placements;
  std::map<NodeId, std::vector<ShardSignature>> signatures;  // one per mesh axis
  std::vector<Transition> transitions;
  /// Bytes each device sends over all transitions.
  double total_bytes() const;
  /// Each value's placement once the plan is done with it: its own, or what a required output's
  /// transition brought it to.
  std::map<ValueId, NdPlacement> final_placements() const;
};

/// The bytes one device holds of a value of `shape` and `dtype` placed `p` on `mesh`: each axis that
/// splits it divides it, except `except_axis` (the axis a collective runs along; -1: none).
double held_bytes(const Shape& shape, DType dtype, const NdPlacement& p, const Mesh& mesh, int except_axis = -1);

}  // namespace troupe::graph
