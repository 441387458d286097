// Sharding propagation (troupe/plan/propagation.hpp): a graph's placements over a mesh, node by node.
#include "troupe/plan/propagation.hpp"

#include <limits>
#include <optional>

#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::plan {

using namespace graph;  // the propagation speaks the graph's vocabulary throughout

namespace {


// Whether `p`, along mesh axis `axis`, fits a value of `shape` placed `others` along the other axes:
// a split names one of its dims, and every axis splitting that dim together divides it evenly.
bool fits(const Placement& p, std::size_t axis, const NdPlacement& others, const Shape& shape, const Mesh& mesh) {
  if (p.kind != Placement::Kind::split) return true;
  if (p.dim < 0 || p.dim >= static_cast<int>(shape.size())) return false;
  std::int64_t parts = static_cast<std::int64_t>(mesh.axes[axis].second) * p.blocks;
  for (std::size_t b = 0; b < others.size(); ++b)
    if (b != axis && others[b].kind == Placement::Kind::split && others[b].dim == p.dim) parts *= mesh.axes[b].second;
  return shape[static_cast<std::size_t>(p.dim)] % parts == 0;
}

// The propagation of one graph's placements over a mesh, step by step: the leaves placed as given,
// then each node in order, per mesh axis, taking the cheapest signature it can run under and
// bringing its inputs there, then the outputs pinned or required brought where they must be.
class ShardingPropagation {
 public:
  ShardingPropagation(const Graph& g, const Mesh& mesh, const std::map<ValueId, NdPlacement>& given,
                      const std::map<ValueId, NdPlacement>& required, const SymBindings& bindings)
      : g_(g), mesh_(mesh), axes_(mesh.axes.size()), given_(given), required_(required), bindings_(bindings) {
    plan_.mesh = mesh;
    for (const Node& node : g.nodes())
      for (ValueId v : node.inputs) readers_[v].push_back(node.id);
  }

  GraphPlacement run() {
    place_leaves();
    for (const Node& node : g_.nodes()) place(node);
    for (const auto& [v, want] : required_) require(v, want, "required");
    return std::move(plan_);
  }

 private:
  // A change of one value's placement along one axis: from which of its versions, by which collective.
  struct Move {
    Placement from;
    Collective collective = Collective::none;
    double bytes = 0;
  };
  // What a signature costs, compared in this order: the bytes its input transitions send, then how
  // many placements it changes (so a free B -> P is not taken when keeping B costs nothing
  // either); between equals, the bytes and changes that bring its outputs to where they are
  // pinned or required.
  struct SignatureCost {
    double input_bytes = 0;
    int input_changes = 0;
    double output_bytes = 0;
    int output_changes = 0;
    bool operator<(const SignatureCost& o) const {
      return std::tie(input_bytes, input_changes, output_bytes, output_changes) <
             std::tie(o.input_bytes, o.input_changes, o.output_bytes, o.output_changes);
    }
  };

  const Shape& shape_of(ValueId v) {
    auto it = shapes_.find(v);
    if (it == shapes_.end()) it = shapes_.emplace(v, bind(g_.value(v).info.shape, bindings_)).first;
    return it->second;
  }
  std::string name_of(ValueId v) const {
    return g_.value(v).name.empty() ? "value " + std::to_string(v) : "'" + g_.value(v).name + "'";
  }

  // The inputs and parameters where they are given, broadcast elsewhere.
  void place_leaves() {
    for (ValueId v = 0; v < static_cast<ValueId>(g_.values().size()); ++v) {
      if (g_.value(v).kind == ValueKind::op_output) continue;
      auto it = given_.find(v);
      NdPlacement p = it == given_.end() ? NdPlacement(axes_) : it->second;
      TROUPE_CHECK(p.size() == axes_, invalid_argument, "sharding: ", name_of(v), " is placed ", placement_str(p),
                   " on the mesh ", mesh_.str(), "; give one placement per mesh axis");
      for (std::size_t a = 0; a < axes_; ++a)
        TROUPE_CHECK(fits(p[a], a, p, shape_of(v), mesh_), invalid_argument, "sharding: ", name_of(v), " of shape ",
                     shape_str(shape_of(v)), " cannot be placed ", placement_str(p), " on the mesh ", mesh_.str(),
                     ": the split dim must exist and divide evenly among the devices splitting it");
      plan_.placements[v] = p;
    }
  }

  // The cheapest way to bring `v` to `to` along axis `a`: from its placement or any version it has
  // been brought to already (a consumer that needs one of them again reuses it).
  Move cheapest(ValueId v, std::size_t a, const Placement& to) {
    const NdPlacement& have = plan_.placements.at(v);
    if (mesh_.axes[a].second == 1) return Move{to, Collective::none, 0};  // one device: every placement is the whole value
    std::vector<Placement> from{have[a]};
    const auto it = versions_.find({v, a});
    if (it != versions_.end()) from.insert(from.end(), it->second.begin(), it->second.end());
    Move best{have[a], Collective::none, std::numeric_limits<double>::infinity()};
    for (const Placement& p : from) {
      if (p == to) return Move{p, Collective::none, 0};
      const Collective c = collective_between(p, to);
      const double bytes = collective_bytes(c, held_bytes(shape_of(v), g_.value(v).info.dtype, have, mesh_, static_cast<int>(a)),
                                            mesh_.axes[a].second);
      if (bytes < best.bytes) best = Move{p, c, bytes};
    }
    return best;
  }

  // Whether bringing `v` to `to` along axis `a` would split a symbolic dim (the batch) it is not
  // split along already: the sizes only bind it for the bytes, and the devices' slices of a
  // symbolic dim are the runtime's data parallelism, given with the inputs, never made inside.
  bool splits_symbolic(ValueId v, std::size_t a, const Placement& to) const {
    if (to.kind != Placement::Kind::split || mesh_.axes[a].second == 1 || plan_.placements.at(v)[a] == to) return false;
    const SymShape& s = g_.value(v).info.shape;
    return to.dim >= 0 && to.dim < static_cast<int>(s.size()) && !s[static_cast<std::size_t>(to.dim)].is_static();
  }

  // Where an op output must end up: pinned, or required of the step's outputs, itself or through
  // the casts that are its only reader (mixed precision casts a gradient before it is an output);
  // null: anywhere.
  const NdPlacement* destination(ValueId v) const {
    for (const auto* placed : {&given_, &required_}) {
      const auto it = placed->find(v);
      if (it != placed->end() && it->second.size() == axes_) return &it->second;
    }
    const auto r = readers_.find(v);
    if (r == readers_.end() || r->second.size() != 1 || g_.node(r->second[0]).op != "cast") return nullptr;
    return destination(g_.node(r->second[0]).outputs[0]);
  }

  // Records bringing input `input` of node `node` (-1: no node) `v` to `to` along axis `a`, unless it is there.
  void transition(ValueId v, NodeId node, int input, std::size_t a, const Placement& to) {
    const Move m = cheapest(v, a, to);
    if (m.collective == Collective::none) return;
    plan_.transitions.push_back({v, node, input, static_cast<int>(a), m.from, to, m.collective, m.bytes});
    versions_[{v, a}].push_back(to);
  }

  // Brings `v` to `want` along every axis where it is placed otherwise (`how`: "pinned" or "required").
  void require(ValueId v, const NdPlacement& want, const char* how) {
    TROUPE_CHECK(want.size() == axes_, invalid_argument, "sharding: ", name_of(v), " is ", how, " ", placement_str(want),
                 " on the mesh ", mesh_.str(), "; give one placement per mesh axis");
    for (std::size_t a = 0; a < axes_; ++a) {
      TROUPE_CHECK(fits(want[a], a, want, shape_of(v), mesh_), invalid_argument, "sharding: ", name_of(v), " of shape ",
                   shape_str(shape_of(v)), " cannot be ", how, " ", placement_str(want), " on the mesh ", mesh_.str());
      transition(v, -1, 0, a, want[a]);
    }
  }

  // The cost of running `node` under `sig` along axis `a`, its inputs wanted and outputs made as
  // chosen along the axes before; null when the signature does not fit.
  std::optional<SignatureCost> cost_of(const Node& node, std::size_t a, const ShardSignature& sig,
                                       const std::vector<NdPlacement>& wanted, const std::vector<NdPlacement>& made) {
    bool legal = sig.inputs.size() == node.inputs.size() && sig.outputs.size() == node.outputs.size();
    for (std::size_t i = 0; legal && i < sig.inputs.size(); ++i)
      legal = fits(sig.inputs[i], a, wanted[i], shape_of(node.inputs[i]), mesh_) && !splits_symbolic(node.inputs[i], a, sig.inputs[i]);
    for (std::size_t o = 0; legal && o < sig.outputs.size(); ++o)
      legal = fits(sig.outputs[o], a, made[o], shape_of(node.outputs[o]), mesh_);
    if (!legal) return std::nullopt;
    SignatureCost cost;
    for (std::size_t i = 0; i < sig.inputs.size(); ++i) {
      const Move m = cheapest(node.inputs[i], a, sig.inputs[i]);
      cost.input_bytes += m.bytes;
      cost.input_changes += m.collective != Collective::none;
    }
    for (std::size_t o = 0; o < sig.outputs.size() && mesh_.axes[a].second > 1; ++o) {
      const NdPlacement* want = destination(node.outputs[o]);
      if (!want || (*want)[a] == sig.outputs[o]) continue;
      NdPlacement held = made[o];
      held[a] = sig.outputs[o];
      const Value& v = g_.value(node.outputs[o]);
      cost.output_bytes += collective_bytes(collective_between(sig.outputs[o], (*want)[a]),
                                            held_bytes(shape_of(v.id), v.info.dtype, held, mesh_, static_cast<int>(a)),
                                            mesh_.axes[a].second);
      cost.output_changes += 1;
    }
    return cost;
  }

  // The signature `node` runs under along axis `a`: the cheapest that fits among its op's and the
  // all-broadcast one, which always fits (the op's own order breaks ties).
  ShardSignature choose(const Node& node, std::size_t a, const std::vector<NdPlacement>& wanted,
                        const std::vector<NdPlacement>& made) {
    const OpDef& def = OpRegistry::instance().get(node.op);
    std::vector<ValueInfo> in_infos, out_infos;
    for (ValueId v : node.inputs) in_infos.push_back(g_.value(v).info);
    for (ValueId v : node.outputs) out_infos.push_back(g_.value(v).info);
    std::vector<Placement> current;
    for (ValueId v : node.inputs) current.push_back(plan_.placements.at(v)[a]);
    std::vector<ShardSignature> candidates;
    if (def.sharding) candidates = def.sharding(ShardContext{node.op, in_infos, out_infos, node.attrs, current});
    candidates.push_back({std::vector<Placement>(node.inputs.size()), std::vector<Placement>(node.outputs.size())});
    const ShardSignature* best = nullptr;
    SignatureCost best_cost{std::numeric_limits<double>::infinity(), 0, 0, 0};
    for (const ShardSignature& sig : candidates) {
      const std::optional<SignatureCost> cost = cost_of(node, a, sig, wanted, made);
      if (cost && *cost < best_cost) {
        best_cost = *cost;
        best = &sig;
      }
    }
    return *best;
  }

  // Places `node`: its signature along each axis, its inputs brought there, its outputs placed, and
  // an output the caller pins brought to its placement right here, for every consumer.
  void place(const Node& node) {
    std::vector<NdPlacement> wanted(node.inputs.size(), NdPlacement(axes_)), made(node.outputs.size(), NdPlacement(axes_));
    std::vector<ShardSignature> chosen;
    for (std::size_t a = 0; a < axes_; ++a) {
      chosen.push_back(choose(node, a, wanted, made));
      const ShardSignature& taken = chosen.back();
      for (std::size_t i = 0; i < node.inputs.size(); ++i) wanted[i][a] = taken.inputs[i];
      for (std::size_t o = 0; o < node.outputs.size(); ++o) made[o][a] = taken.outputs[o];
    }
    for (std::size_t i = 0; i < node.inputs.size(); ++i)
      for (std::size_t a = 0; a < axes_; ++a) transition(node.inputs[i], node.id, static_cast<int>(i), a, wanted[i][a]);
    for (std::size_t o = 0; o < node.outputs.size(); ++o) plan_.placements[node.outputs[o]] = made[o];
    plan_.signatures[node.id] = chosen;
    for (std::size_t o = 0; o < node.outputs.size(); ++o) {
      const ValueId v = node.outputs[o];
      const auto pin = given_.find(v);
      if (pin == given_.end()) continue;
      require(v, pin->second, "pinned");
      plan_.placements[v] = pin->second;
    }
  }

  const Graph& g_;
  const Mesh& mesh_;
  const std::size_t axes_;
  const std::map<ValueId, NdPlacement>& given_;
  const std::map<ValueId, NdPlacement>& required_;
  const SymBindings& bindings_;
  GraphPlacement plan_;
  std::map<ValueId, Shape> shapes_;  // bound shapes, made on first use
  std::map<ValueId, std::vector<NodeId>> readers_;
  // The placements each value has been brought to along each axis.
  std::map<std::pair<ValueId, std::size_t>, std::vector<Placement>> versions_;
};


}  // namespace

GraphPlacement propagate_sharding(const Graph& g, const Mesh& mesh, const std::map<ValueId, NdPlacement>& given,
                                const std::map<ValueId, NdPlacement>& required, const SymBindings& bindings) {
  TROUPE_CHECK(!mesh.axes.empty(), invalid_argument, "sharding: the mesh has no axes; give at least one, e.g. {\"tp\", 2}");
  for (const auto& [name, size] : mesh.axes)
    TROUPE_CHECK(size >= 1, invalid_argument, "sharding: mesh axis '", name, "' has ", size, " devices; give 1 or more");
  return ShardingPropagation(g, mesh, given, required, bindings).run();
}

}  // namespace troupe::plan
