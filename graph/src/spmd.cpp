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

Tensor gather_block_slices(CollectiveGroup& group, const Tensor& piece, int dim, int blocks) {
  const Tensor dense = piece.contiguous();
  const Tensor all = group.all_gather(dense.reshape({1, dense.numel()}));
  std::vector<Tensor> pieces;
  for (std::int64_t r = 0; r < all.size(0); ++r) pieces.push_back(all.slice(0, r, r + 1).reshape(dense.shape()));
  return join_block_slices(pieces, dim, blocks);
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
  Lowering(const Graph& g, const ShardingPlan& plan, const MeshDevice& device)
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
    const NodeId id = out_.add_node(node.op, inputs, local_attrs(node, sigs), local_target(node, made));
    out_.mutable_node(id).label = node.label;
    out_.mutable_node(id).backward = node.backward;
    const std::vector<ValueId> local_outputs = out_.node(id).outputs;  // (adding nodes below moves the node list)
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

  // The local attributes of `node`: a split's sizes shrink where its cut dim is split.
  Attrs local_attrs(const Node& node, const std::vector<ShardSignature>& sigs) const {
    Attrs attrs = node.attrs;
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
    const auto split_attrs = [&](const Placement& p) {
      return Attrs().set("dim", static_cast<std::int64_t>(p.dim)).set("blocks", static_cast<std::int64_t>(p.blocks)).set("parts", static_cast<std::int64_t>(n));
    };
    const auto keep_on_first = [&](ValueId y) {  // a partial sum of a whole value: all of it on device 0
      return index == 0 ? y : out_.node(out_.add_node("zeros_like", {y})).outputs[0];
    };
    const auto local_shard = [&](ValueId y) {  // this device's slice of a whole value, placed `to`
      return out_.node(out_.add_node("local_shard", {y}, split_attrs(to).set("index", static_cast<std::int64_t>(index)))).outputs[0];
    };
    ValueId y = x;
    switch (from.kind) {
      case Kind::partial_sum:
        y = to.kind == Kind::broadcast ? collective("all_reduce", x, axis, {}) : collective("reduce_scatter", x, axis, split_attrs(to));
        break;
      case Kind::split:
        y = collective("all_gather", x, axis, split_attrs(from));
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
  const ShardingPlan& plan_;
  const Mesh& mesh_;
  const MeshDevice& device_;
  Graph out_;
  std::vector<Var> params_;
  std::map<ValueId, std::vector<std::pair<NdPlacement, ValueId>>> versions_;  // each value's local versions
  ValueId last_collective_ = -1;
};

}  // namespace

TracedFunction shard_step(const TracedFunction& step, const ShardingPlan& plan, const MeshDevice& device) {
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
