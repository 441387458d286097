// Lowering a sharding plan to one device's graph (troupe/graph/spmd.hpp).
#include "troupe/graph/spmd.hpp"

#include <algorithm>

#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/layout.hpp"

namespace troupe::graph {

using Kind = Placement::Kind;

Tensor block_slice(const Tensor& full, int dim, int blocks, int parts, int index) {
  const std::int64_t block = full.size(dim) / blocks, len = block / parts;
  if (blocks == 1) return full.slice(dim, index * len, (index + 1) * len);
  std::vector<Tensor> pieces;
  for (int b = 0; b < blocks; ++b) pieces.push_back(full.slice(dim, b * block + index * len, b * block + (index + 1) * len));
  return kernels::concat(pieces, dim);
}

Tensor join_block_slices(const std::vector<Tensor>& pieces, int dim, int blocks) {
  const std::int64_t len = pieces.at(0).size(dim) / blocks;
  std::vector<Tensor> parts;
  for (int b = 0; b < blocks; ++b)
    for (const Tensor& piece : pieces) parts.push_back(piece.slice(dim, b * len, (b + 1) * len));
  return kernels::concat(parts, dim);
}

Tensor join_gathered_rows(const Tensor& rows, const Shape& shape, int dim, int blocks) {
  std::vector<Tensor> pieces;
  for (std::int64_t r = 0; r < rows.size(0); ++r) pieces.push_back(rows.slice(0, r, r + 1).reshape(shape));
  return join_block_slices(pieces, dim, blocks);
}

Tensor gather_block_slices(CollectiveWire& wire, const Tensor& piece, int dim, int blocks) {
  const Tensor dense = piece.contiguous();
  return join_gathered_rows(wire.all_gather(dense.reshape({1, dense.numel()})), dense.shape(), dim, blocks);
}

Tensor shard_of(const Tensor& full, const NdPlacement& p, const Mesh& mesh, const std::vector<int>& coords) {
  TROUPE_CHECK(p.size() == mesh.axes.size() && coords.size() == mesh.axes.size(), invalid_argument, "shard_of: placement ",
               placement_str(p), " and ", coords.size(), " coordinates for the mesh ", mesh.str());
  Tensor x = full;
  for (std::size_t a = 0; a < p.size(); ++a) {
    const int n = mesh.axes[a].second;
    if (n == 1) continue;
    if (p[a].kind == Kind::split) x = block_slice(x, p[a].dim, p[a].blocks, n, coords[a]);
    if (p[a].kind == Kind::partial_sum && coords[a] != 0) x = Tensor::zeros(x.shape(), x.dtype());
  }
  return x;
}

Tensor assemble(const std::vector<Tensor>& shards, const NdPlacement& p, const Mesh& mesh) {
  TROUPE_CHECK(static_cast<int>(shards.size()) == mesh.devices() && p.size() == mesh.axes.size(), invalid_argument,
               "assemble: ", shards.size(), " shards placed ", placement_str(p), " on the mesh ", mesh.str());
  // Combine along the innermost axis first: consecutive runs of its size differ only in it.
  std::vector<Tensor> level = shards;
  for (std::size_t a = p.size(); a-- > 0;) {
    const auto n = static_cast<std::size_t>(mesh.axes[a].second);
    std::vector<Tensor> next;
    for (std::size_t first = 0; first < level.size(); first += n) {
      const std::vector<Tensor> run(level.begin() + static_cast<std::ptrdiff_t>(first),
                                    level.begin() + static_cast<std::ptrdiff_t>(first + n));
      if (n == 1 || p[a].kind == Kind::broadcast) {
        next.push_back(run[0]);
      } else if (p[a].kind == Kind::split) {
        next.push_back(join_block_slices(run, p[a].dim, p[a].blocks));
      } else {
        Tensor sum = run[0];
        for (std::size_t r = 1; r < n; ++r) sum = kernels::binary(kernels::BinaryOp::add, sum, run[r]);
        next.push_back(sum);
      }
    }
    level = std::move(next);
  }
  return level.at(0);
}

std::vector<int> mesh_coords(const Mesh& mesh, int device) {
  TROUPE_CHECK(device >= 0 && device < mesh.devices(), invalid_argument, "mesh_coords: device ", device,
               " is not on the mesh ", mesh.str(), " of ", mesh.devices(), " devices");
  std::vector<int> coords(mesh.axes.size());
  for (std::size_t a = mesh.axes.size(); a-- > 0;) {
    coords[a] = device % mesh.axes[a].second;
    device /= mesh.axes[a].second;
  }
  return coords;
}

namespace {

// The local graph of one device, built node by node from the step's.
class Lowering {
 public:
  Lowering(const Graph& g, const GraphPlacement& plan, const MeshDevice& device)
      : g_(g), plan_(plan), mesh_(plan.mesh), device_(device) {
    TROUPE_CHECK(device.coords.size() == mesh_.axes.size() && device.groups.size() == mesh_.axes.size(), invalid_argument,
                 "shard_step: the device has ", device.coords.size(), " coordinates and ", device.groups.size(),
                 " groups, but the mesh ", mesh_.str(), " has ", mesh_.axes.size(), " axes");
    for (std::size_t a = 0; a < mesh_.axes.size(); ++a)
      TROUPE_CHECK(device.coords[a] >= 0 && device.coords[a] < mesh_.axes[a].second, invalid_argument, "shard_step: coordinate ",
                   device.coords[a], " is outside mesh axis '", mesh_.axes[a].first, "' of ", mesh_.axes[a].second, " devices");
  }

  // The placement as this lowering compares them: along an axis of one device every placement is the whole value.
  NdPlacement normal(NdPlacement p) const {
    for (std::size_t a = 0; a < p.size(); ++a)
      if (mesh_.axes[a].second == 1) p[a] = Placement::broadcast();
    return p;
  }

  // The shape this device holds of `v` placed `p`.
  SymShape local_shape(ValueId v, const NdPlacement& p) const {
    SymShape s = g_.value(v).info.shape;
    for (std::size_t a = 0; a < p.size(); ++a) {
      const int n = mesh_.axes[a].second;
      if (n == 1 || p[a].kind != Kind::split) continue;
      SymDim& d = s.at(static_cast<std::size_t>(p[a].dim));
      const std::optional<SymDim> q = d.divide(SymDim(n));
      TROUPE_CHECK(q.has_value(), invalid_argument, "shard_step: ", name_of(v), " of shape ", sym_shape_str(g_.value(v).info.shape),
                   " is placed ", placement_str(p), " on the mesh ", mesh_.str(), ", but dim ", p[a].dim, " (", d.str(),
                   ") is not a known multiple of ", n, "; split a fixed dim, or trace with the dim as a multiple of ", n);
      d = *q;
    }
    return s;
  }

  // Adds the step's inputs, parameters and constants as this device holds them.
  void sources(const std::vector<Var>& parameters, const std::vector<std::size_t>& trained) {
    for (ValueId v : g_.inputs()) add_source(v, out_.add_input(g_.value(v).name, {g_.value(v).info.dtype, local_shape(v, placed(v))}));
    for (std::size_t k = 0; k < g_.parameters().size(); ++k) {
      const ValueId v = g_.parameters()[k];
      const NdPlacement p = placed(v);
      add_source(v, out_.add_parameter(g_.value(v).name, {g_.value(v).info.dtype, local_shape(v, p)}));
      const Var& full = parameters[k];
      const bool split = std::any_of(p.begin(), p.end(), [](const Placement& q) { return q.kind == Kind::split; });
      const bool owned = split || std::find(trained.begin(), trained.end(), k) != trained.end();
      params_.push_back(owned ? Var::leaf(shard_of(full.tensor(), p, mesh_, device_.coords).clone(), full.name()) : full);
    }
    for (const Value& v : g_.values())
      if (v.kind == ValueKind::constant) add_source(v.id, out_.add_constant(shard_of(v.constant, placed(v.id), mesh_, device_.coords)));
  }

  // Adds `node` under its chosen signatures, then brings its pinned outputs to their placements.
  void node(const Node& node) {
    const std::vector<ShardSignature>& sigs = plan_.signatures.at(node.id);
    std::vector<ValueId> inputs;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      NdPlacement want(sigs.size());
      for (std::size_t a = 0; a < sigs.size(); ++a) want[a] = sigs[a].inputs[i];
      inputs.push_back(at(node.inputs[i], normal(want)));
    }
    std::vector<NdPlacement> made(node.outputs.size(), NdPlacement(sigs.size()));
    for (std::size_t o = 0; o < node.outputs.size(); ++o)
      for (std::size_t a = 0; a < sigs.size(); ++a) made[o][a] = sigs[a].outputs[o];
    for (NdPlacement& m : made) m = normal(m);
    const int axis = expanding_axis(node, sigs);
    std::vector<ValueId> local_outputs;
    if (axis >= 0) {
      Expansion expansion(*this, node, static_cast<std::size_t>(axis));
      local_outputs = sigs[static_cast<std::size_t>(axis)].expand(expansion, inputs, node.attrs);
    } else {
      local_outputs = add_like(node, node.op, inputs, local_attrs(node, sigs), local_target(node, made));
    }
    double scale = 1;  // a mean over split rows counts only this device's: its share is 1/n of it
    for (std::size_t a = 0; a < sigs.size(); ++a)
      if (sigs[a].mean_of_split) scale /= mesh_.axes[a].second;
    for (std::size_t o = 0; o < node.outputs.size(); ++o) {
      ValueId x = local_outputs[o];
      const SymShape want = local_shape(node.outputs[o], made[o]);
      TROUPE_CHECK(out_.value(x).info.shape == want, runtime, "shard_step: op '", node.op, "' (node ", node.id, ") gives ",
                   sym_shape_str(out_.value(x).info.shape), " on device ", coords_str(), " but its placement ",
                   placement_str(made[o]), " needs ", sym_shape_str(want), "; its sharding rule and shape rule disagree");
      if (scale != 1) x = out_.node(out_.add_node("mul_scalar", {x}, Attrs().set("value", scale))).outputs[0];
      versions_[node.outputs[o]] = {{made[o], x}};
      const NdPlacement pinned = placed(node.outputs[o]);
      if (pinned != made[o]) versions_[node.outputs[o]] = {{pinned, at(node.outputs[o], pinned)}};
    }
  }

  // Marks the step's outputs, each as the plan leaves it.
  void outputs() {
    const std::map<ValueId, NdPlacement> final = plan_.final_placements();
    for (ValueId v : g_.outputs()) out_.add_output(at(v, normal(final.at(v))));
  }

  Graph& graph() { return out_; }
  std::vector<Var>& parameters() { return params_; }

 private:
  // The device's graph as an expanding signature along `axis` builds on it (ShardSignature::expand).
  class Expansion final : public LocalGraph {
   public:
    Expansion(Lowering& l, const Node& node, std::size_t axis) : l_(l), node_(node), axis_(axis) {}
    std::vector<ValueId> add(const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs) override {
      return l_.add_like(node_, op, inputs, attrs, {});
    }
    const ValueInfo& info(ValueId v) const override { return l_.out_.value(v).info; }
    ValueId all_reduce(ValueId x) override { return l_.collective("all_reduce", x, axis_, {}); }
    ValueId all_gather(ValueId x, int dim) override {
      return l_.collective("all_gather", x, axis_, split_attrs(Placement::split(dim), devices()));
    }
    int index() const override { return l_.device_.coords[axis_]; }
    int devices() const override { return l_.mesh_.axes[axis_].second; }

   private:
    Lowering& l_;
    const Node& node_;
    std::size_t axis_;
  };

  // Adds `op` as part of the step's `node` (its label, forward or backward); its outputs.
  std::vector<ValueId> add_like(const Node& node, const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs,
                                const SymShape& target) {
    const NodeId id = out_.add_node(op, inputs, attrs, target);
    out_.mutable_node(id).label = node.label;
    out_.mutable_node(id).backward = node.backward;
    return out_.node(id).outputs;
  }

  // The mesh axis along which `node` runs expanded (ShardSignature::expand), or -1. The expansion
  // sees its slices' offsets along that axis alone: no other axis may expand the node or split a
  // dim that axis splits.
  int expanding_axis(const Node& node, const std::vector<ShardSignature>& sigs) const {
    int axis = -1;
    for (std::size_t a = 0; a < sigs.size(); ++a) {
      if (!sigs[a].expand || mesh_.axes[a].second == 1) continue;
      TROUPE_CHECK(axis < 0, invalid_argument, "shard_step: op '", node.op, "' (node ", node.id, ") runs expanded along mesh axes '",
                   mesh_.axes[static_cast<std::size_t>(axis)].first, "' and '", mesh_.axes[a].first,
                   "'; place it so that one axis at most splits what it needs whole");
      axis = static_cast<int>(a);
    }
    if (axis < 0) return axis;
    const ShardSignature& e = sigs[static_cast<std::size_t>(axis)];
    const auto clash = [](const Placement& x, const Placement& y) {
      return x.kind == Kind::split && y.kind == Kind::split && x.dim == y.dim;
    };
    for (std::size_t b = 0; b < sigs.size(); ++b) {
      if (static_cast<int>(b) == axis || mesh_.axes[b].second == 1) continue;
      bool same_dim = false;
      for (std::size_t i = 0; i < e.inputs.size(); ++i) same_dim |= clash(e.inputs[i], sigs[b].inputs[i]);
      for (std::size_t o = 0; o < e.outputs.size(); ++o) same_dim |= clash(e.outputs[o], sigs[b].outputs[o]);
      TROUPE_CHECK(!same_dim, invalid_argument, "shard_step: op '", node.op, "' (node ", node.id, ") runs expanded along mesh axis '",
                   mesh_.axes[static_cast<std::size_t>(axis)].first, "' while axis '", mesh_.axes[b].first,
                   "' splits the same dim; split it along one axis");
    }
    return axis;
  }

  std::string name_of(ValueId v) const {
    return g_.value(v).name.empty() ? "value " + std::to_string(v) : "'" + g_.value(v).name + "'";
  }
  std::string coords_str() const {
    std::string s = "(";
    for (std::size_t a = 0; a < device_.coords.size(); ++a) s += (a ? ", " : "") + std::to_string(device_.coords[a]);
    return s + ")";
  }
  NdPlacement placed(ValueId v) const { return normal(plan_.placements.at(v)); }
  void add_source(ValueId full, ValueId local) { versions_[full] = {{placed(full), local}}; }

  // The local attributes of `node`: a split's sizes shrink where its cut dim is split; a random
  // op's "shard" (its index along dims 0 and 1 among equal slices, dropout's) says which slice
  // this device draws, so that the shards draw what the whole tensor would.
  Attrs local_attrs(const Node& node, const std::vector<ShardSignature>& sigs) const {
    Attrs attrs = node.attrs;
    if (attrs.has("shard")) {
      std::vector<std::int64_t> shard = attrs.get_ints("shard");
      for (std::size_t a = 0; a < sigs.size(); ++a) {
        const Placement& p = sigs[a].outputs[0];
        if (p.kind != Kind::split || mesh_.axes[a].second == 1) continue;
        TROUPE_CHECK(p.dim < 2 && p.blocks == 1, invalid_argument, "shard_step: ", node.op, " (node ", node.id,
                     ") draws random numbers and is split along dim ", p.dim, "; only dims 0 and 1 can be split");
        shard[static_cast<std::size_t>(p.dim)] = shard[static_cast<std::size_t>(p.dim)] * mesh_.axes[a].second + device_.coords[a];
      }
      attrs.set("shard", shard);
    }
    if (node.op != "split") return attrs;
    const auto rank = static_cast<std::int64_t>(g_.value(node.inputs[0]).info.shape.size());
    const std::int64_t cut = (attrs.get_int("axis") + rank) % rank;
    std::int64_t parts = 1;
    for (std::size_t a = 0; a < sigs.size(); ++a)
      if (sigs[a].inputs[0].kind == Kind::split && sigs[a].inputs[0].dim == cut) parts *= mesh_.axes[a].second;
    std::vector<std::int64_t> sizes = attrs.get_ints("sizes");
    for (std::int64_t& size : sizes) size /= parts;
    attrs.set("sizes", sizes);
    return attrs;
  }

  // A reshape's target as this device's slice has it (-1 stays inferred).
  SymShape local_target(const Node& node, const std::vector<NdPlacement>& made) const {
    SymShape target = node.target;
    if (target.empty()) return target;
    for (std::size_t a = 0; a < made[0].size(); ++a) {
      const Placement& p = made[0][a];
      if (p.kind != Kind::split || mesh_.axes[a].second == 1) continue;
      SymDim& d = target.at(static_cast<std::size_t>(p.dim));
      if (d == SymDim(-1)) continue;
      const std::optional<SymDim> q = d.divide(SymDim(mesh_.axes[a].second));
      TROUPE_CHECK(q.has_value(), invalid_argument, "shard_step: reshape (node ", node.id, ") to ", sym_shape_str(node.target),
                   " is split along dim ", p.dim, ", which is not a known multiple of ", mesh_.axes[a].second);
      d = *q;
    }
    return target;
  }

  // The attributes of a collective or slice of `p` among `parts` devices.
  static Attrs split_attrs(const Placement& p, int parts) {
    return Attrs()
        .set("dim", static_cast<std::int64_t>(p.dim))
        .set("blocks", static_cast<std::int64_t>(p.blocks))
        .set("parts", static_cast<std::int64_t>(parts));
  }

  // A collective op, chained after this device's previous one.
  ValueId collective(const std::string& op, ValueId x, std::size_t axis, Attrs attrs) {
    std::vector<ValueId> inputs{x};
    if (last_collective_ >= 0) inputs.push_back(last_collective_);
    attrs.set("group", static_cast<std::int64_t>(device_.groups[axis]));
    last_collective_ = out_.node(out_.add_node(op, inputs, attrs)).outputs[0];
    return last_collective_;
  }

  // Converts the local value `x` of `v` along `axis` from cur[axis] to `to`, the other axes as in `cur`.
  ValueId convert(ValueId v, ValueId x, NdPlacement& cur, std::size_t axis, const Placement& to) {
    const Placement from = cur[axis];
    if (from == to) return x;
    const int n = mesh_.axes[axis].second, index = device_.coords[axis];
    for (const Placement* p : {&from, &to}) {
      if (p->kind != Kind::split) continue;
      for (std::size_t b = axis + 1; b < cur.size(); ++b)
        TROUPE_CHECK(cur[b].kind != Kind::split || cur[b].dim != p->dim, invalid_argument, "shard_step: ", name_of(v),
                     " must change from ", placement_str(cur), " along mesh axis '", mesh_.axes[axis].first,
                     "' while the inner axis '", mesh_.axes[b].first, "' splits the same dim ", p->dim,
                     "; place the inner axis first");
    }
    const auto keep_on_first = [&](ValueId y) {  // a partial sum of a whole value: all of it on device 0
      return index == 0 ? y : out_.node(out_.add_node("zeros_like", {y})).outputs[0];
    };
    const auto local_shard = [&](ValueId y) {  // this device's slice of a whole value, placed `to`
      return out_.node(out_.add_node("local_shard", {y}, split_attrs(to, n).set("index", static_cast<std::int64_t>(index)))).outputs[0];
    };
    ValueId y = x;
    switch (from.kind) {
      case Kind::partial_sum:
        y = to.kind == Kind::broadcast ? collective("all_reduce", x, axis, {}) : collective("reduce_scatter", x, axis, split_attrs(to, n));
        break;
      case Kind::split:
        y = collective("all_gather", x, axis, split_attrs(from, n));
        if (to.kind == Kind::split) y = local_shard(y);
        if (to.kind == Kind::partial_sum) y = keep_on_first(y);
        break;
      case Kind::broadcast:
        y = to.kind == Kind::split ? local_shard(x) : keep_on_first(x);
        break;
    }
    cur[axis] = to;
    return y;
  }

  // The local value of `v` placed `want`: one it already has, or the cheapest converted.
  ValueId at(ValueId v, const NdPlacement& want) {
    std::vector<std::pair<NdPlacement, ValueId>>& have = versions_.at(v);
    for (const auto& [p, id] : have)
      if (p == want) return id;
    // Start from the version whose conversion moves the least (all-reduce counting twice).
    std::size_t best = 0;
    double best_cost = 1e300;
    for (std::size_t k = 0; k < have.size(); ++k) {
      double cost = 0;
      for (std::size_t a = 0; a < want.size(); ++a)
        cost += collective_bytes(collective_between(have[k].first[a], want[a]), 1, mesh_.axes[a].second);
      if (cost < best_cost) {
        best_cost = cost;
        best = k;
      }
    }
    NdPlacement cur = have[best].first;
    ValueId x = have[best].second;
    for (std::size_t a = 0; a < want.size(); ++a) x = convert(v, x, cur, a, want[a]);
    have.emplace_back(want, x);
    return x;
  }

  const Graph& g_;
  const GraphPlacement& plan_;
  const Mesh& mesh_;
  const MeshDevice& device_;
  Graph out_;
  std::vector<Var> params_;
  std::map<ValueId, std::vector<std::pair<NdPlacement, ValueId>>> versions_;  // each value's local versions
  ValueId last_collective_ = -1;
};

}  // namespace

TracedFunction shard_step(const TracedFunction& step, const GraphPlacement& plan, const MeshDevice& device) {
  const Graph& g = step.graph();
  Lowering lower(g, plan, device);
  lower.sources(step.parameters(), step.gradient_parameters());
  for (const Node& node : g.nodes()) lower.node(node);
  lower.outputs();
  std::vector<InputSpec> signature = step.signature();
  for (std::size_t i = 0; i < signature.size(); ++i) signature[i].shape = lower.graph().value(lower.graph().inputs()[i]).info.shape;
  return step.with_graph(std::make_shared<const Graph>(std::move(lower.graph())), std::move(signature),
                         std::move(lower.parameters()));
}

}  // namespace troupe::graph
