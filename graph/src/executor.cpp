#include "troupe/graph/executor.hpp"

#include <algorithm>

#include "troupe/graph/dropout.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
std::string expected_str(const Value& v) { return std::string(dtype_name(v.info.dtype)) + sym_shape_str(v.info.shape); }
}  // namespace

SymBindings bind_inputs(const Graph& g, const std::vector<Tensor>& inputs) {
  TROUPE_CHECK(inputs.size() == g.inputs().size(), invalid_argument, "graph takes ", g.inputs().size(),
               " inputs, got ", inputs.size());
  SymBindings bindings;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Value& v = g.value(g.inputs()[k]);
    const Tensor& t = inputs[k];
    const std::string who = "input '" + v.name + "'";
    TROUPE_CHECK(t.defined(), invalid_argument, who, " is undefined");
    TROUPE_CHECK(t.dtype() == v.info.dtype, dtype_mismatch, who, ": expected ", expected_str(v), ", got ", t.str(),
                 "; convert it with .to(DType)");
    const SymShape& s = v.info.shape;
    TROUPE_CHECK(t.dim() == static_cast<std::int64_t>(s.size()), shape_mismatch, who, ": expected ", expected_str(v),
                 " (rank ", s.size(), "), got ", t.str());
    for (std::size_t d = 0; d < s.size(); ++d) {
      const std::int64_t actual = t.shape()[d];
      if (s[d].is_static()) {
        TROUPE_CHECK(actual == s[d].size(), shape_mismatch, who, ": expected ", expected_str(v), ", got ", t.str(),
                     " (dim ", d, " is fixed at ", s[d].size(),
                     "); if it should vary, declare it dynamic in the input signature (-1 or a named symbol)");
        continue;
      }
      TROUPE_CHECK(s[d].symbols().size() == 1 && s[d].size() == 1, invalid_argument, who, ": dim ", d, " is ",
                   s[d].str(), "; signature dims must be a size or a single symbol");
      const std::string& sym = s[d].symbols()[0];
      auto [it, fresh] = bindings.emplace(sym, actual);
      TROUPE_CHECK(fresh || it->second == actual, shape_mismatch, who, ": expected ", expected_str(v), ", got ",
                   t.str(), ": symbol '", sym, "' is already ", it->second, " from an earlier input");
    }
  }
  return bindings;
}

namespace {

// The input of node `n` whose buffer its output 0 can take: an op_output of the output's shape,
// dtype and dense layout, read by n alone (once) and last, whose storage nothing else shares.
int reusable_input(const Graph& g, const Node& n, const OpDef& def, const std::vector<Tensor>& values,
                   const std::vector<NodeId>& last_use, const Shape& shape, DType dtype) {
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    if (def.in_place_input >= 0 && i != static_cast<std::size_t>(def.in_place_input)) continue;
    const ValueId v = n.inputs[i];
    const Tensor& t = values[static_cast<std::size_t>(v)];
    if (g.value(v).kind != ValueKind::op_output || last_use[static_cast<std::size_t>(v)] != n.id) continue;
    if (std::count(n.inputs.begin(), n.inputs.end(), v) != 1) continue;
    if (!t.defined() || t.shape() != shape || t.dtype() != dtype || !t.is_contiguous()) continue;
    if (t.storage().use_count() != 1 || t.offset_bytes() != 0) continue;
    return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

std::vector<Tensor> execute(const Graph& g, const std::vector<Tensor>& inputs, const std::vector<Tensor>& parameters,
                            std::vector<ValueId> fetch, bool in_place) {
  if (fetch.empty()) fetch = g.outputs();
  const SymBindings bindings = bind_inputs(g, inputs);
  TROUPE_CHECK(parameters.size() == g.parameters().size(), invalid_argument, "graph has ", g.parameters().size(),
               " parameters, got ", parameters.size());
  std::vector<Tensor> values(g.values().size());
  for (std::size_t k = 0; k < inputs.size(); ++k) values[static_cast<std::size_t>(g.inputs()[k])] = inputs[k];
  for (std::size_t k = 0; k < parameters.size(); ++k) {
    const Value& v = g.value(g.parameters()[k]);
    const Tensor& p = parameters[k];
    TROUPE_CHECK(p.defined() && p.dtype() == v.info.dtype && to_sym(p.shape()) == v.info.shape, shape_mismatch,
                 "parameter '", v.name, "': expected ", expected_str(v), ", got ", p.defined() ? p.str() : "undefined");
    values[static_cast<std::size_t>(v.id)] = p;
  }
  for (const Value& v : g.values())
    if (v.kind == ValueKind::constant) values[static_cast<std::size_t>(v.id)] = v.constant;

  // last_use[v]: the last node reading v; fetched values live to the end.
  const auto node_count = static_cast<NodeId>(g.nodes().size());
  std::vector<NodeId> last_use(g.values().size(), -1);
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) last_use[static_cast<std::size_t>(v)] = n.id;
  for (ValueId v : fetch) {
    TROUPE_CHECK(v >= 0 && v < static_cast<ValueId>(g.values().size()), invalid_argument, "execute: value ", v,
                 " is not in this graph");
    last_use[static_cast<std::size_t>(v)] = node_count;
  }

  std::vector<Tensor> in;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Node& n : g.nodes()) {
    const OpDef& def = OpRegistry::instance().get(n.op);
    in.clear();
    shapes.clear();
    dtypes.clear();
    for (ValueId o : n.outputs) {
      shapes.push_back(bind(g.value(o).info.shape, bindings));
      dtypes.push_back(g.value(o).info.dtype);
    }
    const int reuse = in_place && def.in_place ? reusable_input(g, n, def, values, last_use, shapes[0], dtypes[0]) : -1;
    for (ValueId v : n.inputs) in.push_back(values[static_cast<std::size_t>(v)]);
    const ComputeContext ctx{n.attrs, shapes, dtypes, n.label, eager_random_position()};
    std::vector<Tensor> out = reuse >= 0 ? def.run_in_place(in, ctx, static_cast<std::size_t>(reuse)) : def.run(in, ctx);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const ValueId o = n.outputs[i];
      if (last_use[static_cast<std::size_t>(o)] >= 0) values[static_cast<std::size_t>(o)] = std::move(out[i]);
    }
    for (ValueId v : n.inputs)
      if (last_use[static_cast<std::size_t>(v)] == n.id && g.value(v).kind == ValueKind::op_output)
        values[static_cast<std::size_t>(v)] = Tensor();
  }
  std::vector<Tensor> result;
  for (ValueId v : fetch) result.push_back(values[static_cast<std::size_t>(v)]);
  return result;
}

}  // namespace troupe::graph
