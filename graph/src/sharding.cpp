#include "troupe/graph/sharding.hpp"

#include <limits>

#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

std::string Placement::str() const {
  switch (kind) {
    case Kind::broadcast: return "B";
    case Kind::split: return "S(" + std::to_string(dim) + ")";
    case Kind::partial_sum: return "P";
  }
  return "?";
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

namespace {

// Whether `p`, along mesh axis `axis`, fits a value of `shape` placed `others` along the other axes:
// a split names one of its dims, and every axis splitting that dim together divides it evenly.
bool fits(const Placement& p, std::size_t axis, const NdPlacement& others, const Shape& shape, const Mesh& mesh) {
  if (p.kind != Placement::Kind::split) return true;
  if (p.dim < 0 || p.dim >= static_cast<int>(shape.size())) return false;
  std::int64_t parts = mesh.axes[axis].second;
  for (std::size_t b = 0; b < others.size(); ++b)
    if (b != axis && others[b].kind == Placement::Kind::split && others[b].dim == p.dim) parts *= mesh.axes[b].second;
  return shape[static_cast<std::size_t>(p.dim)] % parts == 0;
}

// The bytes of `v` each device holds along `axis`: the value's bytes divided by the axes other
// than `axis` that split it.
double local_bytes(const Shape& shape, DType dtype, const NdPlacement& placed, std::size_t axis, const Mesh& mesh) {
  double bytes = static_cast<double>(shape_numel(shape)) * static_cast<double>(dtype_size(dtype));
  for (std::size_t b = 0; b < placed.size(); ++b)
    if (b != axis && placed[b].kind == Placement::Kind::split) bytes /= mesh.axes[b].second;
  return bytes;
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

  for (const Node& node : g.nodes()) {
    const OpDef& def = OpRegistry::instance().get(node.op);
    std::vector<ValueInfo> in_infos, out_infos;
    for (ValueId v : node.inputs) in_infos.push_back(g.value(v).info);
    for (ValueId v : node.outputs) out_infos.push_back(g.value(v).info);
    std::vector<ShardSignature> candidates;
    if (def.sharding) candidates = def.sharding(ShardContext{node.op, in_infos, out_infos, node.attrs});
    candidates.push_back({std::vector<Placement>(node.inputs.size()), std::vector<Placement>(node.outputs.size())});

    std::vector<NdPlacement> wanted(node.inputs.size(), NdPlacement(axes)), made(node.outputs.size(), NdPlacement(axes));
    std::vector<ShardSignature> chosen;
    for (std::size_t a = 0; a < axes; ++a) {
      const int devices = mesh.axes[a].second;
      // The cost of a signature: the bytes its input transitions send, then how many placements
      // it changes (so a free B -> P is not taken when keeping B costs nothing either).
      const ShardSignature* best = nullptr;
      std::pair<double, int> best_cost{std::numeric_limits<double>::infinity(), 0};
      for (const ShardSignature& sig : candidates) {
        bool legal = sig.inputs.size() == node.inputs.size() && sig.outputs.size() == node.outputs.size();
        for (std::size_t i = 0; legal && i < sig.inputs.size(); ++i)
          legal = fits(sig.inputs[i], a, wanted[i], shape_of(node.inputs[i]), mesh);
        for (std::size_t o = 0; legal && o < sig.outputs.size(); ++o)
          legal = fits(sig.outputs[o], a, made[o], shape_of(node.outputs[o]), mesh);
        if (!legal) continue;
        std::pair<double, int> cost{0, 0};
        for (std::size_t i = 0; i < sig.inputs.size(); ++i) {
          const ValueId v = node.inputs[i];
          const NdPlacement& have = plan.placements.at(v);
          const Collective c = collective_between(have[a], sig.inputs[i]);
          cost.first += collective_bytes(c, local_bytes(shape_of(v), g.value(v).info.dtype, have, a, mesh), devices);
          cost.second += c != Collective::none;
        }
        if (cost < best_cost) {
          best_cost = cost;
          best = &sig;
        }
      }
      // The all-broadcast signature always fits, so some signature was taken.
      chosen.push_back(*best);
      for (std::size_t i = 0; i < node.inputs.size(); ++i) wanted[i][a] = best->inputs[i];
      for (std::size_t o = 0; o < node.outputs.size(); ++o) made[o][a] = best->outputs[o];
    }
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      const NdPlacement& have = plan.placements.at(v);
      for (std::size_t a = 0; a < axes; ++a) {
        const Collective c = collective_between(have[a], wanted[i][a]);
        if (c == Collective::none) continue;
        const double bytes = collective_bytes(c, local_bytes(shape_of(v), g.value(v).info.dtype, have, a, mesh), mesh.axes[a].second);
        plan.transitions.push_back({v, node.id, static_cast<int>(i), static_cast<int>(a), have[a], wanted[i][a], c, bytes});
      }
    }
    for (std::size_t o = 0; o < node.outputs.size(); ++o) plan.placements[node.outputs[o]] = made[o];
    plan.signatures[node.id] = chosen;
  }

  for (const auto& [v, want] : required) {
    TROUPE_CHECK(want.size() == axes, invalid_argument, "sharding: output ", name_of(v), " is required ", placement_str(want),
                 " on the mesh ", mesh.str(), "; give one placement per mesh axis");
    const NdPlacement& have = plan.placements.at(v);
    for (std::size_t a = 0; a < axes; ++a) {
      TROUPE_CHECK(fits(want[a], a, want, shape_of(v), mesh), invalid_argument, "sharding: output ", name_of(v), " of shape ",
                   shape_str(shape_of(v)), " cannot be placed ", placement_str(want), " on the mesh ", mesh.str());
      const Collective c = collective_between(have[a], want[a]);
      if (c == Collective::none) continue;
      const double bytes = collective_bytes(c, local_bytes(shape_of(v), g.value(v).info.dtype, have, a, mesh), mesh.axes[a].second);
      plan.transitions.push_back({v, -1, 0, static_cast<int>(a), have[a], want[a], c, bytes});
    }
  }
  return plan;
}

}  // namespace troupe::graph
