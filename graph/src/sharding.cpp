#include "troupe/graph/sharding.hpp"

#include <functional>
#include <limits>
#include <tuple>

#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

std::string Placement::str() const {
  switch (kind) {
    case Kind::broadcast: return "B";
    case Kind::split: return "S(" + std::to_string(dim) + ")" + (blocks > 1 ? "x" + std::to_string(blocks) : "");
    case Kind::partial_sum: return "P";
  }
  return "?";
}

std::vector<std::string> placement_strings(const NdPlacement& p) {
  std::vector<std::string> out;
  for (const Placement& q : p) out.push_back(q.str());
  return out;
}

std::string placement_str(const NdPlacement& p) {
  std::string s = "(";
  for (std::size_t i = 0; i < p.size(); ++i) s += (i ? ", " : "") + p[i].str();
  return s + ")";
}

int Mesh::devices() const {
  int n = 1;
  for (const auto& [name, size] : axes) n *= size;
  return n;
}

std::string Mesh::str() const {
  std::string s;
  for (std::size_t i = 0; i < axes.size(); ++i) s += (i ? " x " : "") + axes[i].first + "=" + std::to_string(axes[i].second);
  return s.empty() ? "(no axes)" : s;
}

const char* to_string(Collective c) {
  switch (c) {
    case Collective::none: return "none";
    case Collective::all_reduce: return "all-reduce";
    case Collective::reduce_scatter: return "reduce-scatter";
    case Collective::all_gather: return "all-gather";
    case Collective::all_to_all: return "all-to-all";
    case Collective::local: return "local";
  }
  return "?";
}

Collective collective_between(const Placement& from, const Placement& to) {
  using K = Placement::Kind;
  if (from == to) return Collective::none;
  switch (from.kind) {
    case K::partial_sum: return to.kind == K::broadcast ? Collective::all_reduce : Collective::reduce_scatter;
    case K::split: return to.kind == K::broadcast ? Collective::all_gather
                          : to.kind == K::split  ? Collective::all_to_all
                                                 : Collective::local;
    case K::broadcast: return Collective::local;
  }
  return Collective::none;
}

double collective_bytes(Collective c, double bytes, int devices) {
  const double n = devices;
  switch (c) {
    case Collective::all_reduce: return 2 * (n - 1) / n * bytes;
    case Collective::reduce_scatter:
    case Collective::all_gather: return (n - 1) / n * bytes;
    case Collective::all_to_all: return (n - 1) / (n * n) * bytes;
    case Collective::none:
    case Collective::local: return 0;
  }
  return 0;
}

double ShardingPlan::total_bytes() const {
  double sum = 0;
  for (const Transition& t : transitions) sum += t.bytes;
  return sum;
}

std::map<ValueId, NdPlacement> ShardingPlan::final_placements() const {
  std::map<ValueId, NdPlacement> out = placements;
  for (const Transition& t : transitions)
    if (t.consumer < 0) out[t.value][static_cast<std::size_t>(t.mesh_axis)] = t.to;
  return out;
}

double held_bytes(const Shape& shape, DType dtype, const NdPlacement& p, const Mesh& mesh, int except_axis) {
  double bytes = static_cast<double>(shape_numel(shape)) * static_cast<double>(dtype_size(dtype));
  for (std::size_t a = 0; a < p.size(); ++a)
    if (static_cast<int>(a) != except_axis && p[a].kind == Placement::Kind::split) bytes /= mesh.axes[a].second;
  return bytes;
}

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

}  // namespace

ShardingPlan propagate_sharding(const Graph& g, const Mesh& mesh, const std::map<ValueId, NdPlacement>& given,
                                const std::map<ValueId, NdPlacement>& required, const SymBindings& bindings) {
  TROUPE_CHECK(!mesh.axes.empty(), invalid_argument, "sharding: the mesh has no axes; give at least one, e.g. {\"tp\", 2}");
  for (const auto& [name, size] : mesh.axes)
    TROUPE_CHECK(size >= 1, invalid_argument, "sharding: mesh axis '", name, "' has ", size, " devices; give 1 or more");
  const std::size_t axes = mesh.axes.size();
  ShardingPlan plan;
  plan.mesh = mesh;
  std::map<ValueId, Shape> shapes;
  const auto shape_of = [&](ValueId v) -> const Shape& {
    auto it = shapes.find(v);
    if (it == shapes.end()) it = shapes.emplace(v, bind(g.value(v).info.shape, bindings)).first;
    return it->second;
  };
  const auto name_of = [&](ValueId v) { return g.value(v).name.empty() ? "value " + std::to_string(v) : "'" + g.value(v).name + "'"; };

  for (ValueId v = 0; v < static_cast<ValueId>(g.values().size()); ++v) {
    if (g.value(v).kind == ValueKind::op_output) continue;
    auto it = given.find(v);
    NdPlacement p = it == given.end() ? NdPlacement(axes) : it->second;
    TROUPE_CHECK(p.size() == axes, invalid_argument, "sharding: ", name_of(v), " is placed ", placement_str(p), " on the mesh ",
                 mesh.str(), "; give one placement per mesh axis");
    for (std::size_t a = 0; a < axes; ++a)
      TROUPE_CHECK(fits(p[a], a, p, shape_of(v), mesh), invalid_argument, "sharding: ", name_of(v), " of shape ",
                   shape_str(shape_of(v)), " cannot be placed ", placement_str(p), " on the mesh ", mesh.str(),
                   ": the split dim must exist and divide evenly among the devices splitting it");
    plan.placements[v] = p;
  }

  // The placements each value has been brought to along each axis: a consumer that needs one of
  // them again reuses it, and one that needs another starts from the cheapest of them.
  std::map<std::pair<ValueId, std::size_t>, std::vector<Placement>> versions;
  struct Move {
    Placement from;
    Collective collective = Collective::none;
    double bytes = 0;
  };
  const auto cheapest = [&](ValueId v, std::size_t a, const Placement& to) {
    const NdPlacement& have = plan.placements.at(v);
    if (mesh.axes[a].second == 1) return Move{to, Collective::none, 0};  // one device: every placement is the whole value
    std::vector<Placement> from{have[a]};
    const auto it = versions.find({v, a});
    if (it != versions.end()) from.insert(from.end(), it->second.begin(), it->second.end());
    Move best{have[a], Collective::none, std::numeric_limits<double>::infinity()};
    for (const Placement& p : from) {
      if (p == to) return Move{p, Collective::none, 0};
      const Collective c = collective_between(p, to);
      const double bytes = collective_bytes(c, held_bytes(shape_of(v), g.value(v).info.dtype, have, mesh, static_cast<int>(a)), mesh.axes[a].second);
      if (bytes < best.bytes) best = Move{p, c, bytes};
    }
    return best;
  };

  // Whether bringing `v` to `to` along axis `a` would split a symbolic dim (the batch) it is not
  // split along already: the sizes only bind it for the bytes, and the devices' slices of a
  // symbolic dim are the runtime's data parallelism, given with the inputs, never made inside.
  const auto splits_symbolic = [&](ValueId v, std::size_t a, const Placement& to) {
    if (to.kind != Placement::Kind::split || mesh.axes[a].second == 1 || plan.placements.at(v)[a] == to) return false;
    const SymShape& s = g.value(v).info.shape;
    return to.dim >= 0 && to.dim < static_cast<int>(s.size()) && !s[static_cast<std::size_t>(to.dim)].is_static();
  };

  // Where an op output must end up: pinned, or required of the step's outputs, itself or through
  // the casts that are its only reader (mixed precision casts a gradient before it is an output);
  // null: anywhere.
  std::map<ValueId, std::vector<NodeId>> readers;
  for (const Node& node : g.nodes())
    for (ValueId v : node.inputs) readers[v].push_back(node.id);
  const std::function<const NdPlacement*(ValueId)> destination = [&](ValueId v) -> const NdPlacement* {
    for (const auto* placed : {&given, &required}) {
      const auto it = placed->find(v);
      if (it != placed->end() && it->second.size() == axes) return &it->second;
    }
    const auto r = readers.find(v);
    if (r == readers.end() || r->second.size() != 1 || g.node(r->second[0]).op != "cast") return nullptr;
    return destination(g.node(r->second[0]).outputs[0]);
  };

  // Brings `v` to `want` along every axis where it is placed otherwise (`how`: "pinned" or "required").
  const auto require = [&](ValueId v, const NdPlacement& want, const char* how) {
    TROUPE_CHECK(want.size() == axes, invalid_argument, "sharding: ", name_of(v), " is ", how, " ", placement_str(want),
                 " on the mesh ", mesh.str(), "; give one placement per mesh axis");
    for (std::size_t a = 0; a < axes; ++a) {
      TROUPE_CHECK(fits(want[a], a, want, shape_of(v), mesh), invalid_argument, "sharding: ", name_of(v), " of shape ",
                   shape_str(shape_of(v)), " cannot be ", how, " ", placement_str(want), " on the mesh ", mesh.str());
      const Move m = cheapest(v, a, want[a]);
      if (m.collective == Collective::none) continue;
      plan.transitions.push_back({v, -1, 0, static_cast<int>(a), m.from, want[a], m.collective, m.bytes});
      versions[{v, a}].push_back(want[a]);
    }
  };

  for (const Node& node : g.nodes()) {
    const OpDef& def = OpRegistry::instance().get(node.op);
    std::vector<ValueInfo> in_infos, out_infos;
    for (ValueId v : node.inputs) in_infos.push_back(g.value(v).info);
    for (ValueId v : node.outputs) out_infos.push_back(g.value(v).info);
    std::vector<NdPlacement> wanted(node.inputs.size(), NdPlacement(axes)), made(node.outputs.size(), NdPlacement(axes));
    std::vector<ShardSignature> chosen;
    for (std::size_t a = 0; a < axes; ++a) {
      std::vector<Placement> current;
      for (ValueId v : node.inputs) current.push_back(plan.placements.at(v)[a]);
      std::vector<ShardSignature> candidates;
      if (def.sharding) candidates = def.sharding(ShardContext{node.op, in_infos, out_infos, node.attrs, current});
      candidates.push_back({std::vector<Placement>(node.inputs.size()), std::vector<Placement>(node.outputs.size())});
      // The cost of a signature: the bytes its input transitions send, then how many placements
      // it changes (so a free B -> P is not taken when keeping B costs nothing either); between
      // equals, the bytes and changes that bring its outputs to where they are pinned or required.
      const ShardSignature* best = nullptr;
      std::tuple<double, int, double, int> best_cost{std::numeric_limits<double>::infinity(), 0, 0, 0};
      for (const ShardSignature& sig : candidates) {
        bool legal = sig.inputs.size() == node.inputs.size() && sig.outputs.size() == node.outputs.size();
        for (std::size_t i = 0; legal && i < sig.inputs.size(); ++i)
          legal = fits(sig.inputs[i], a, wanted[i], shape_of(node.inputs[i]), mesh) &&
                  !splits_symbolic(node.inputs[i], a, sig.inputs[i]);
        for (std::size_t o = 0; legal && o < sig.outputs.size(); ++o)
          legal = fits(sig.outputs[o], a, made[o], shape_of(node.outputs[o]), mesh);
        if (!legal) continue;
        std::tuple<double, int, double, int> cost{0, 0, 0, 0};
        for (std::size_t i = 0; i < sig.inputs.size(); ++i) {
          const Move m = cheapest(node.inputs[i], a, sig.inputs[i]);
          std::get<0>(cost) += m.bytes;
          std::get<1>(cost) += m.collective != Collective::none;
        }
        for (std::size_t o = 0; o < sig.outputs.size() && mesh.axes[a].second > 1; ++o) {
          const NdPlacement* want = destination(node.outputs[o]);
          if (!want || (*want)[a] == sig.outputs[o]) continue;
          NdPlacement held = made[o];
          held[a] = sig.outputs[o];
          const Value& v = g.value(node.outputs[o]);
          std::get<2>(cost) += collective_bytes(collective_between(sig.outputs[o], (*want)[a]),
                                                held_bytes(shape_of(v.id), v.info.dtype, held, mesh, static_cast<int>(a)),
                                                mesh.axes[a].second);
          std::get<3>(cost) += 1;
        }
        if (cost < best_cost) {
          best_cost = cost;
          best = &sig;
        }
      }
      // The all-broadcast signature always fits, so some signature was taken.
      chosen.push_back(*best);
      const ShardSignature taken = *best;
      for (std::size_t i = 0; i < node.inputs.size(); ++i) wanted[i][a] = taken.inputs[i];
      for (std::size_t o = 0; o < node.outputs.size(); ++o) made[o][a] = taken.outputs[o];
    }
    for (std::size_t i = 0; i < node.inputs.size(); ++i)
      for (std::size_t a = 0; a < axes; ++a) {
        const ValueId v = node.inputs[i];
        const Move m = cheapest(v, a, wanted[i][a]);
        if (m.collective == Collective::none) continue;
        plan.transitions.push_back({v, node.id, static_cast<int>(i), static_cast<int>(a), m.from, wanted[i][a], m.collective, m.bytes});
        versions[{v, a}].push_back(wanted[i][a]);
      }
    for (std::size_t o = 0; o < node.outputs.size(); ++o) plan.placements[node.outputs[o]] = made[o];
    plan.signatures[node.id] = chosen;
    // An output the caller pins is brought to its placement right here, for every consumer.
    for (std::size_t o = 0; o < node.outputs.size(); ++o) {
      const ValueId v = node.outputs[o];
      const auto pin = given.find(v);
      if (pin == given.end()) continue;
      require(v, pin->second, "pinned");
      plan.placements[v] = pin->second;
    }
  }

  for (const auto& [v, want] : required) require(v, want, "required");
  return plan;
}

}  // namespace troupe::graph
