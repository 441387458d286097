// The graph checker: the invariants every graph, and so every pass's result, must keep. Graphs
// built with Graph's own methods keep them by construction; a pass that rebuilds or edits a graph
// can break them, and this says which node broke which rule.
#include <set>

#include "troupe/graph/op_def.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
std::string info_str(const ValueInfo& i) { return std::string(dtype_name(i.dtype)) + sym_shape_str(i.shape); }
bool same(const ValueInfo& a, const ValueInfo& b) { return a.dtype == b.dtype && a.shape == b.shape; }
std::string where(const Node& n) { return "graph check: node " + std::to_string(n.id) + " (" + n.op + ")"; }

// Values: ids in order, sources listed where they belong, constants matching their info, op
// outputs pointing at a producer that lists them.
void check_values(const Graph& g) {
  const std::set<ValueId> inputs(g.inputs().begin(), g.inputs().end());
  const std::set<ValueId> params(g.parameters().begin(), g.parameters().end());
  for (std::size_t k = 0; k < g.values().size(); ++k) {
    const Value& v = g.values()[k];
    const std::string at = "graph check: value %" + std::to_string(k);
    TROUPE_CHECK(v.id == static_cast<ValueId>(k), runtime, at, " has id ", v.id);
    TROUPE_CHECK((v.kind == ValueKind::input) == (inputs.count(v.id) != 0), runtime, at,
                 " is an input but not in the input list, or the reverse");
    TROUPE_CHECK((v.kind == ValueKind::parameter) == (params.count(v.id) != 0), runtime, at,
                 " is a parameter but not in the parameter list, or the reverse");
    if (v.kind == ValueKind::constant)
      TROUPE_CHECK(v.constant.defined() && v.constant.dtype() == v.info.dtype && to_sym(v.constant.shape()) == v.info.shape,
                   runtime, at, " is a constant whose tensor does not match its info ", info_str(v.info));
    if (v.kind != ValueKind::op_output) continue;
    TROUPE_CHECK(v.producer >= 0 && v.producer < static_cast<NodeId>(g.nodes().size()), runtime, at,
                 " is an op output without a producer (dangling)");
    const Node& p = g.node(v.producer);
    TROUPE_CHECK(v.output_index >= 0 && static_cast<std::size_t>(v.output_index) < p.outputs.size() &&
                     p.outputs[static_cast<std::size_t>(v.output_index)] == v.id,
                 runtime, at, " claims to be output ", v.output_index, " of node ", v.producer, " (", p.op,
                 "), which does not list it");
  }
}

// Value `v` must exist and, if computed, come from a node before `before`.
void check_defined(const Graph& g, ValueId v, NodeId before, const std::string& at) {
  TROUPE_CHECK(v >= 0 && v < static_cast<ValueId>(g.values().size()), runtime, at, ": value %", v,
               " is not in the graph");
  const Value& value = g.value(v);
  TROUPE_CHECK(value.kind != ValueKind::op_output || value.producer < before, runtime, at, ": value %", v,
               " is computed by node ", value.producer, ", which does not come before");
}

// Nodes: ids in order, inputs defined before use, outputs as inference gives them, overrides known.
void check_nodes(const Graph& g) {
  for (std::size_t k = 0; k < g.nodes().size(); ++k) {
    const Node& n = g.nodes()[k];
    TROUPE_CHECK(n.id == static_cast<NodeId>(k), runtime, "graph check: node ", k, " has id ", n.id);
    for (ValueId v : n.inputs) check_defined(g, v, n.id, where(n));
    std::vector<ValueInfo> infos;
    for (ValueId v : n.inputs) infos.push_back(g.value(v).info);
    const OpDef& def = OpRegistry::instance().get(n.op);
    const std::vector<ValueInfo> expect = def.infer(InferContext{n.op, infos, n.attrs, n.target});
    TROUPE_CHECK(expect.size() == n.outputs.size(), runtime, where(n), " has ", n.outputs.size(),
                 " outputs; inference gives ", expect.size());
    for (std::size_t i = 0; i < expect.size(); ++i) {
      const Value& o = g.value(n.outputs[i]);
      TROUPE_CHECK(o.producer == n.id && o.output_index == static_cast<int>(i), runtime, where(n), ": output %",
                   o.id, " does not point back at it");
      TROUPE_CHECK(same(o.info, expect[i]), runtime, where(n), ": output %", o.id, " is ", info_str(o.info),
                   " but inference gives ", info_str(expect[i]));
    }
    TROUPE_CHECK(n.region >= -1 && n.region < static_cast<int>(g.regions().size()), runtime, where(n),
                 " names custom gradient region ", n.region, ", which does not exist");
    TROUPE_CHECK(n.gradient.empty() || OpRegistry::instance().has_gradient(n.gradient), runtime, where(n),
                 ": gradient override '", n.gradient, "' is not registered");
  }
}

// Regions: contiguous node ranges whose nodes name them, inputs from before, outputs by their end.
void check_regions(const Graph& g) {
  const auto node_count = static_cast<NodeId>(g.nodes().size());
  for (std::size_t k = 0; k < g.regions().size(); ++k) {
    const CustomRegion& r = g.regions()[k];
    const std::string at = "graph check: custom gradient '" + r.name + "'";
    // A forward that returns its inputs unchanged leaves an empty region (last = first - 1).
    TROUPE_CHECK(r.first >= 0 && r.first - 1 <= r.last && r.last < node_count, runtime, at, " spans nodes ", r.first,
                 "..", r.last, " of ", node_count);
    TROUPE_CHECK(static_cast<bool>(r.backward), runtime, at, " has no backward");
    for (const Node& n : g.nodes()) {
      const bool inside = n.id >= r.first && n.id <= r.last;
      TROUPE_CHECK(inside == (n.region == static_cast<int>(k)), runtime, at, ": node ", n.id, " (", n.op, ") ",
                   inside ? "lies in its range but names another region" : "names it but lies outside its range");
    }
    for (ValueId v : r.inputs) check_defined(g, v, r.first, at);
    for (ValueId v : r.outputs) check_defined(g, v, r.last + 1, at);  // a forward may pass an input on
  }
}
}  // namespace

void check_graph(const Graph& g) {
  check_values(g);
  check_nodes(g);
  check_regions(g);
  for (ValueId v : g.outputs()) check_defined(g, v, static_cast<NodeId>(g.nodes().size()), "graph check: output");
}

void check_rewrite(const Graph& before, const Graph& after, const std::string& pass) {
  const std::string at = "graph pass '" + pass + "'";
  auto same_list = [&](const std::vector<ValueId>& a, const std::vector<ValueId>& b, const char* what, bool names) {
    TROUPE_CHECK(a.size() == b.size(), runtime, at, " changed the number of ", what, " from ", a.size(), " to ",
                 b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      const Value &x = before.value(a[k]), &y = after.value(b[k]);
      TROUPE_CHECK(same(x.info, y.info) && (!names || x.name == y.name), runtime, at, " changed ", what, " ", k,
                   " from '", x.name, "' ", info_str(x.info), " to '", y.name, "' ", info_str(y.info));
    }
  };
  same_list(before.inputs(), after.inputs(), "inputs", true);
  same_list(before.parameters(), after.parameters(), "parameters", true);
  same_list(before.outputs(), after.outputs(), "outputs", false);
  std::multiset<std::string> regions, overrides;
  for (const CustomRegion& r : before.regions()) regions.insert(r.name);
  for (const Node& n : before.nodes()) overrides.insert(n.op + ":" + n.gradient);
  for (const CustomRegion& r : after.regions()) {
    auto it = regions.find(r.name);
    TROUPE_CHECK(it != regions.end(), runtime, at, " added custom gradient region '", r.name, "'");
    regions.erase(it);
  }
  for (const Node& n : after.nodes())
    TROUPE_CHECK(n.gradient.empty() || overrides.count(n.op + ":" + n.gradient), runtime, at,
                 " gave node ", n.id, " (", n.op, ") the gradient override '", n.gradient, "', which no ",
                 n.op, " node had");
}

}  // namespace troupe::graph
