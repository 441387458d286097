// Common-subexpression elimination: a node identical to an earlier one (same op, the same mapped
// inputs, attributes, target shape, label, gradient override and custom-gradient region) is
// dropped and its outputs read the earlier node's. Ops are deterministic functions of their
// inputs, so both would compute the same bits; nodes with side effects are never merged. Merging
// only within one region (or outside all) keeps every region's nodes and outputs inside it.
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "passes/rewriter.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/passes.hpp"

namespace troupe::graph {

namespace {
// An attribute written so that two attributes give the same text exactly when they are equal;
// doubles by their bits (so -0 and 0 differ, and a NaN equals itself).
void write_attr(std::ostringstream& os, const AttrValue& v) {
  if (auto i = std::get_if<std::int64_t>(&v)) {
    os << 'i' << *i;
  } else if (auto d = std::get_if<double>(&v)) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, d, sizeof bits);
    os << 'd' << std::hex << bits << std::dec;
  } else {
    os << 'l';
    for (auto x : std::get<std::vector<std::int64_t>>(v)) os << x << ',';
  }
}

// Everything that decides what node `n` computes and how it is differentiated, as one string.
std::string node_key(const Node& n, const std::vector<ValueId>& inputs) {
  std::ostringstream os;
  os << n.op << '\x1f';
  for (ValueId v : inputs) os << v << ',';
  os << '\x1f';
  for (const auto& [name, value] : n.attrs.items()) {
    os << name << '=';
    write_attr(os, value);
    os << ';';
  }
  os << '\x1f' << sym_shape_str(n.target) << '\x1f' << n.label << '\x1f' << n.gradient << '\x1f' << n.region;
  return os.str();
}

// Maps n's outputs onto those of the earlier node `first` when every output may be replaced.
bool merge_into(passes::Rewriter& r, const Node& n, const Node& first) {
  for (std::size_t i = 0; i < n.outputs.size(); ++i)
    if (!r.can_replace(n.outputs[i], first.outputs[i])) return false;
  for (std::size_t i = 0; i < n.outputs.size(); ++i) r.replace(n.outputs[i], first.outputs[i]);
  return true;
}
}  // namespace

Graph eliminate_common_subexpressions(const Graph& g) {
  passes::Rewriter r(g);
  std::unordered_map<std::string, NodeId> seen;  // key -> node of the new graph
  for (const Node& n : g.nodes()) {
    if (OpRegistry::instance().get(n.op).side_effects) {
      r.copy(n);
      continue;
    }
    const std::string key = node_key(n, r.map(n.inputs));
    auto it = seen.find(key);
    if (it != seen.end() && merge_into(r, n, r.result().node(it->second))) continue;
    const NodeId m = r.copy(n);
    if (it == seen.end()) seen.emplace(key, m);
  }
  return r.finish();
}

}  // namespace troupe::graph
