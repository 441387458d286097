#include "troupe/graph/sharding.hpp"

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

int Mesh::axis(const std::string& name) const {
  for (std::size_t a = 0; a < axes.size(); ++a)
    if (axes[a].first == name) return static_cast<int>(a);
  return -1;
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

double GraphPlacement::total_bytes() const {
  double sum = 0;
  for (const Transition& t : transitions) sum += t.bytes;
  return sum;
}

std::map<ValueId, NdPlacement> GraphPlacement::final_placements() const {
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


}  // namespace troupe::graph
