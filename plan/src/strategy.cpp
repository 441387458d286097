// Strategy files (troupe/plan/strategy.hpp): JSON through nlohmann, every field checked on load.
#include "troupe/plan/strategy.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "troupe/graph/spmd.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::plan {

using graph::NdPlacement;
using graph::Placement;
using nlohmann::json;

graph::Placement parse_placement(const std::string& text) {
  if (text == "B") return Placement::broadcast();
  if (text == "P") return Placement::partial_sum();
  // S(<dim>) or S(<dim>)x<blocks>
  int dim = -1, blocks = 1, used = 0;
  const bool split = std::sscanf(text.c_str(), "S(%d)%n", &dim, &used) == 1 && used > 0;
  if (split && static_cast<std::size_t>(used) < text.size()) {
    int more = 0;
    const bool ok = std::sscanf(text.c_str() + used, "x%d%n", &blocks, &more) == 1 &&
                    static_cast<std::size_t>(used + more) == text.size();
    if (!ok) blocks = 0;
  }
  TROUPE_CHECK(split && dim >= 0 && dim < 64 && blocks >= 1 && blocks <= 1024 && text.find(' ') == std::string::npos,
               invalid_argument, "placement '", printable(text), "' is none of B, P, S(<dim>) or S(<dim>)x<blocks>");
  return Placement::split(dim, blocks);
}

std::string strategy_fingerprint(const graph::TracedFunction& step, const graph::Mesh& mesh) {
  const graph::Graph& g = step.graph();
  std::string text = mesh.str() + ";";
  for (graph::ValueId v : g.parameters())
    text += g.value(v).name + ":" + graph::sym_shape_str(g.value(v).info.shape) + ":" + dtype_name(g.value(v).info.dtype) + ";";
  for (graph::ValueId v : g.inputs()) text += graph::sym_shape_str(g.value(v).info.shape) + ";";
  for (const graph::Node& n : g.nodes()) text += n.op + ",";
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

namespace {

// What device `device` (row-major mesh coordinates) holds of a value of `shape` placed `p`: its
// shard shape and where its first block of each dim starts.
std::pair<Shape, Shape> layout_of(const Shape& shape, const NdPlacement& p, const graph::Mesh& mesh, int device) {
  const std::vector<int> coords = graph::mesh_coords(mesh, device);
  Shape local = shape, offset(shape.size(), 0);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::int64_t blocks = 1;
    for (const Placement& q : p)
      if (q.kind == Placement::Kind::split && q.dim == static_cast<int>(d)) blocks = q.blocks;
    std::int64_t len = shape[d] / blocks;
    for (std::size_t a = 0; a < p.size(); ++a)
      if (p[a].kind == Placement::Kind::split && p[a].dim == static_cast<int>(d)) {
        len /= mesh.axes[a].second;
        offset[d] += coords[a] * len;
      }
    local[d] = len * blocks;
  }
  return {local, offset};
}

// Reads the placements of `j` (one per mesh axis) at `where`, for the error.
NdPlacement placement_of(const json& j, std::size_t axes, const std::string& where) {
  TROUPE_CHECK(j.is_array() && j.size() == axes, invalid_argument, where, " must be a list of ", axes,
               " placements, one per mesh axis");
  NdPlacement p;
  for (const json& q : j) {
    TROUPE_CHECK(q.is_string(), invalid_argument, where, " holds a placement that is not a string");
    p.push_back(parse_placement(q.get<std::string>()));
  }
  return p;
}

Shape shape_of(const json& j, const std::string& where) {
  TROUPE_CHECK(j.is_array() && j.size() <= 16, invalid_argument, where, " must be a list of at most 16 sizes");
  Shape s;
  for (const json& d : j) {
    TROUPE_CHECK(d.is_number_integer() && d.get<std::int64_t>() >= 0 && d.get<std::int64_t>() < (std::int64_t{1} << 40),
                 invalid_argument, where, " holds a size that is not an integer from 0 to 2^40");
    s.push_back(d.get<std::int64_t>());
  }
  return s;
}

const json& field(const json& j, const char* key, const std::string& where) {
  TROUPE_CHECK(j.is_object() && j.contains(key), invalid_argument, where, " has no \"", key, "\"");
  return j.at(key);
}

}  // namespace

Strategy make_strategy(const graph::TracedFunction& step, const graph::Mesh& mesh, const PlacementRequest& request,
                       const graph::GraphPlacement& plan) {
  const graph::Graph& g = step.graph();
  Strategy s;
  s.mesh = mesh;
  s.fingerprint = strategy_fingerprint(step, mesh);
  for (graph::ValueId v : g.parameters()) {
    Strategy::Layout l;
    l.name = g.value(v).name;
    l.shape = graph::to_static(g.value(v).info.shape, "a parameter");
    l.placement = plan.placements.at(v);
    for (int d = 0; d < mesh.devices(); ++d) {
      const auto [local, offset] = layout_of(l.shape, l.placement, mesh, d);
      l.shard_shape = local;
      l.offsets.push_back(offset);
    }
    s.parameters.push_back(l);
  }
  for (graph::ValueId v : g.inputs()) s.inputs.push_back(plan.placements.at(v));
  for (const auto& [v, p] : request.given)
    if (g.value(v).kind == graph::ValueKind::op_output) {
      const graph::Node& n = g.nodes()[static_cast<std::size_t>(g.value(v).producer)];
      s.pins.push_back({n.id, n.op, g.value(v).output_index, p});
    }
  for (graph::ValueId v : g.outputs()) {
    const auto it = request.required.find(v);
    s.outputs.push_back(it != request.required.end() ? it->second : plan.placements.at(v));
  }
  for (const graph::Node& n : g.nodes()) {
    std::vector<NdPlacement> outs;
    for (graph::ValueId v : n.outputs) outs.push_back(plan.placements.at(v));
    s.ops.push_back(outs);
    s.op_names.push_back(n.op);
  }
  return s;
}

void save_strategy(const std::string& path, const Strategy& s) {
  json j{{"format", "troupe-strategy"}, {"version", 1}, {"fingerprint", s.fingerprint}, {"grad_compression", s.grad_compression}};
  j["mesh"] = json::array();
  for (const auto& [name, size] : s.mesh.axes) j["mesh"].push_back({name, size});
  j["parameters"] = json::array();
  for (const Strategy::Layout& l : s.parameters)
    j["parameters"].push_back({{"name", l.name}, {"shape", l.shape}, {"placement", graph::placement_strings(l.placement)},
                               {"shard_shape", l.shard_shape}, {"offsets", l.offsets}});
  j["inputs"] = json::array();
  for (const NdPlacement& p : s.inputs) j["inputs"].push_back(graph::placement_strings(p));
  j["pins"] = json::array();
  for (const Strategy::Pin& p : s.pins)
    j["pins"].push_back({{"node", p.node}, {"op", p.op}, {"output", p.output}, {"placement", graph::placement_strings(p.placement)}});
  j["outputs"] = json::array();
  for (const NdPlacement& p : s.outputs) j["outputs"].push_back(graph::placement_strings(p));
  j["ops"] = json::array();
  for (std::size_t n = 0; n < s.ops.size(); ++n) {
    json outs = json::array();
    for (const NdPlacement& p : s.ops[n]) outs.push_back(graph::placement_strings(p));
    j["ops"].push_back({{"op", s.op_names[n]}, {"outputs", outs}});
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    TROUPE_CHECK(out.good(), io, "strategy file '", tmp, "' could not be written; check the folder exists and has room");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  TROUPE_CHECK(!ec, io, "strategy file '", path, "' could not be written: ", ec.message());
}

Strategy load_strategy(const std::string& path) {
  std::ifstream in(path);
  TROUPE_CHECK(in.good(), io, "strategy file '", path, "' cannot be read; give the file --strategy-save wrote");
  std::stringstream text;
  text << in.rdbuf();
  try {
    const json j = json::parse(text.str());
    TROUPE_CHECK(j.is_object() && j.value("format", "") == "troupe-strategy", invalid_argument,
                 "it is not a troupe strategy (no \"format\": \"troupe-strategy\")");
    TROUPE_CHECK(field(j, "version", "the file") == 1, invalid_argument, "its version is not 1");
    Strategy s;
    const json& fp = field(j, "fingerprint", "the file");
    TROUPE_CHECK(fp.is_string() && fp.get<std::string>().size() == 16, invalid_argument, "\"fingerprint\" is not 16 hex digits");
    s.fingerprint = fp.get<std::string>();
    const json& mesh = field(j, "mesh", "the file");
    TROUPE_CHECK(mesh.is_array() && !mesh.empty() && mesh.size() <= 8, invalid_argument, "\"mesh\" must list 1 to 8 axes");
    for (const json& axis : mesh) {
      TROUPE_CHECK(axis.is_array() && axis.size() == 2 && axis[0].is_string() && axis[1].is_number_integer() &&
                       axis[1].get<std::int64_t>() >= 1 && axis[1].get<std::int64_t>() <= 65536,
                   invalid_argument, "each \"mesh\" axis must be [name, size from 1 to 65536]");
      s.mesh.axes.emplace_back(axis[0].get<std::string>(), axis[1].get<int>());
    }
    const std::size_t axes = s.mesh.axes.size();
    const auto list = [&](const char* key) -> const json& {
      const json& l = field(j, key, "the file");
      TROUPE_CHECK(l.is_array(), invalid_argument, "\"", key, "\" is not a list");
      return l;
    };
    for (const json& p : list("parameters")) {
      const std::string where = "a parameter";
      Strategy::Layout l;
      const json& name = field(p, "name", where);
      TROUPE_CHECK(name.is_string(), invalid_argument, "a parameter's \"name\" is not a string");
      l.name = name.get<std::string>();
      const std::string shown = "'" + printable(l.name) + "'";
      l.shape = shape_of(field(p, "shape", shown), "the shape of " + shown);
      l.placement = placement_of(field(p, "placement", shown), axes, "the placement of " + shown);
      l.shard_shape = shape_of(field(p, "shard_shape", shown), "the shard shape of " + shown);
      s.parameters.push_back(l);
    }
    for (const json& p : list("inputs")) s.inputs.push_back(placement_of(p, axes, "an input's placement"));
    for (const json& p : list("pins")) {
      Strategy::Pin pin;
      const json &node = field(p, "node", "a pin"), &op = field(p, "op", "a pin"), &output = field(p, "output", "a pin");
      TROUPE_CHECK(node.is_number_integer() && output.is_number_integer() && op.is_string(), invalid_argument,
                   "a pin's \"node\" and \"output\" must be integers and its \"op\" a string");
      pin.node = node.get<graph::NodeId>();
      pin.output = output.get<int>();
      pin.op = op.get<std::string>();
      pin.placement = placement_of(field(p, "placement", "a pin"), axes, "a pin's placement");
      s.pins.push_back(pin);
    }
    for (const json& p : list("outputs")) s.outputs.push_back(placement_of(p, axes, "an output's placement"));
    for (const json& o : list("ops")) {
      const json& op = field(o, "op", "an op");
      TROUPE_CHECK(op.is_string(), invalid_argument, "an op's \"op\" is not a string");
      s.op_names.push_back(op.get<std::string>());
      std::vector<NdPlacement> outs;
      for (const json& p : field(o, "outputs", "an op")) outs.push_back(placement_of(p, axes, "an op's output placement"));
      s.ops.push_back(outs);
    }
    if (j.contains("grad_compression")) {  // (files saved before it compress nothing)
      TROUPE_CHECK(j["grad_compression"].is_string(), invalid_argument, "\"grad_compression\" is not a string");
      s.grad_compression = j["grad_compression"].get<std::string>();
    }
    return s;
  } catch (const json::exception& e) {
    fail(ErrorKind::invalid_argument, "strategy file '", path, "' is not valid JSON or has a field of the wrong type (",
         printable(e.what(), 400), "); save it again with --strategy-save");
  } catch (const Error& e) {
    fail(e.kind(), "strategy file '", path, "': ", e.message(), "; save it again with --strategy-save");
  }
}

PlacementRequest strategy_request(const Strategy& s, const graph::TracedFunction& step, const graph::Mesh& mesh,
                                  const std::string& file) {
  const graph::Graph& g = step.graph();
  const auto differs = [&](const auto&... what) {
    fail(ErrorKind::invalid_argument, "strategy file '", file, "' does not fit: ", what...,
         "; plan again without --strategy-load (and save the new plan with --strategy-save)");
  };
  if (s.mesh.axes != mesh.axes) differs("it was made for the mesh ", printable(s.mesh.str()), ", and this job's is ", mesh.str());
  if (s.parameters.size() != g.parameters().size())
    differs("it holds ", s.parameters.size(), " parameters, and this model has ", g.parameters().size());
  for (std::size_t p = 0; p < s.parameters.size(); ++p) {
    const graph::Value& v = g.value(g.parameters()[p]);
    const Shape shape = graph::to_static(v.info.shape, "a parameter");
    if (s.parameters[p].name != v.name || s.parameters[p].shape != shape)
      differs("parameter ", p, " is '", printable(s.parameters[p].name), "' ", shape_str(s.parameters[p].shape), " in the file and '",
              v.name, "' ", shape_str(shape), " in this model");
  }
  if (s.op_names.size() != g.nodes().size() || s.ops.size() != g.nodes().size())
    differs("it holds ", s.op_names.size(), " ops, and this step has ", g.nodes().size());
  for (std::size_t n = 0; n < g.nodes().size(); ++n)
    if (s.op_names[n] != g.nodes()[n].op)
      differs("op ", n, " is ", printable(s.op_names[n]), " in the file and ", g.nodes()[n].op, " in this step");
  if (s.inputs.size() != g.inputs().size() || s.outputs.size() != g.outputs().size())
    differs("it holds ", s.inputs.size(), " inputs and ", s.outputs.size(), " outputs, and this step has ", g.inputs().size(),
            " and ", g.outputs().size());
  const std::string fingerprint = strategy_fingerprint(step, mesh);
  if (s.fingerprint != fingerprint)
    differs("its fingerprint is ", printable(s.fingerprint), " and this step's ", fingerprint,
            " (the inputs' shapes or the dtypes changed)");
  PlacementRequest r;
  for (std::size_t p = 0; p < s.parameters.size(); ++p) r.given[g.parameters()[p]] = s.parameters[p].placement;
  for (std::size_t i = 0; i < s.inputs.size(); ++i) r.given[g.inputs()[i]] = s.inputs[i];
  for (const Strategy::Pin& pin : s.pins) {
    if (pin.node < 0 || pin.node >= static_cast<graph::NodeId>(g.nodes().size()) ||
        g.nodes()[static_cast<std::size_t>(pin.node)].op != pin.op || pin.output < 0 ||
        pin.output >= static_cast<int>(g.nodes()[static_cast<std::size_t>(pin.node)].outputs.size()))
      differs("it pins output ", pin.output, " of op ", pin.node, " (", printable(pin.op), "), which this step does not have");
    r.given[g.nodes()[static_cast<std::size_t>(pin.node)].outputs[static_cast<std::size_t>(pin.output)]] = pin.placement;
  }
  for (std::size_t o = 0; o < s.outputs.size(); ++o) r.required[g.outputs()[o]] = s.outputs[o];
  return r;
}

}  // namespace troupe::plan
