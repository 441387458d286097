#include "troupe/graph/amp.hpp"

#include <map>

#include "passes/rewriter.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

AmpLevel parse_amp_level(std::string_view name) {
  for (AmpLevel l : {AmpLevel::O0, AmpLevel::O1})
    if (name == to_string(l)) return l;
  fail(ErrorKind::invalid_argument, "unknown mixed-precision level '", name,
       "'; expected O0 (f32) or O1 (products in low precision)");
}

const char* to_string(AmpLevel level) { return level == AmpLevel::O0 ? "O0" : "O1"; }

DType parse_amp_dtype(std::string_view name) {
  if (name == "bf16") return DType::bf16;
  if (name == "fp16" || name == "f16") return DType::f16;
  fail(ErrorKind::invalid_argument, "unknown mixed-precision dtype '", name, "'; expected bf16 or fp16");
}

Graph autocast(const Graph& g, DType low) {
  TROUPE_CHECK(low == DType::bf16 || low == DType::f16, invalid_argument, "autocast: the low-precision dtype must be ",
               "bf16 or f16, got ", dtype_name(low));
  passes::Rewriter r(g);
  std::map<ValueId, ValueId> lowered;  // new value -> its cast, so each value is cast once
  const auto cast_down = [&](ValueId old, const Node& reader) {
    const ValueId v = r.map(old);
    auto it = lowered.find(v);
    if (it != lowered.end()) return it->second;
    const Attrs to_low = Attrs().set("dtype", static_cast<std::int64_t>(low));
    return lowered.emplace(v, r.emit_before(reader, "cast", {v}, to_low)[0]).first->second;
  };
  for (const Node& n : g.nodes()) {
    const std::vector<int>& operands = OpRegistry::instance().get(n.op).autocast_inputs;
    bool lower = !n.backward && !operands.empty();
    for (int i : operands) lower = lower && g.value(n.inputs[static_cast<std::size_t>(i)]).info.dtype == DType::f32;
    if (!lower) {
      r.copy(n);
      continue;
    }
    std::vector<ValueId> inputs = r.map(n.inputs);
    for (int i : operands) inputs[static_cast<std::size_t>(i)] = cast_down(n.inputs[static_cast<std::size_t>(i)], n);
    Attrs attrs = n.attrs;
    attrs.set("out_dtype", static_cast<std::int64_t>(DType::f32));
    r.emit_for(n, n.op, inputs, attrs, n.target);
  }
  return r.finish();
}

}  // namespace troupe::graph
