#include "troupe/graph/amp.hpp"

#include <map>

#include "passes/rewriter.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

AmpLevel parse_amp_level(std::string_view name) {
  for (AmpLevel l : {AmpLevel::O0, AmpLevel::O1, AmpLevel::O2, AmpLevel::O3})
    if (name == to_string(l)) return l;
  fail(ErrorKind::invalid_argument, "unknown mixed-precision level '", name,
       "'; expected O0 (f32), O1 (products in low precision), O2 (activations too) or O3 (everything)");
}

const char* to_string(AmpLevel level) {
  switch (level) {
    case AmpLevel::O0: return "O0";
    case AmpLevel::O1: return "O1";
    case AmpLevel::O2: return "O2";
    case AmpLevel::O3: return "O3";
  }
  return "?";
}

DType parse_amp_dtype(std::string_view name) {
  if (name == "bf16") return DType::bf16;
  if (name == "fp16" || name == "f16") return DType::f16;
  fail(ErrorKind::invalid_argument, "unknown mixed-precision dtype '", name, "'; expected bf16 or fp16");
}

namespace {

// Casts of new values, each made once, before the first node that needs it.
class Casts {
 public:
  explicit Casts(passes::Rewriter& r) : r_(r) {}
  /// New value `v` as `dtype`: itself when it has it, else its one cast.
  ValueId to(ValueId v, DType dtype, const Node& reader) {
    if (r_.result().value(v).info.dtype == dtype) return v;
    auto it = made_.find({v, dtype});
    if (it != made_.end()) return it->second;
    const Attrs attrs = Attrs().set("dtype", static_cast<std::int64_t>(dtype));
    return made_.emplace(std::make_pair(v, dtype), r_.emit_before(reader, "cast", {v}, attrs)[0]).first->second;
  }

 private:
  passes::Rewriter& r_;
  std::map<std::pair<ValueId, DType>, ValueId> made_;
};

// O1: the autocast inputs of an op whose operands are f32 go down; the result stays f32.
void lower_products(passes::Rewriter& r, Casts& casts, const Graph& g, const Node& n, DType low) {
  const std::vector<int>& operands = OpRegistry::instance().get(n.op).autocast_inputs;
  bool lower = !n.backward && !operands.empty();
  for (int i : operands) lower = lower && g.value(n.inputs[static_cast<std::size_t>(i)]).info.dtype == DType::f32;
  if (!lower) {
    r.copy(n);
    return;
  }
  std::vector<ValueId> inputs = r.map(n.inputs);
  for (int i : operands) inputs[static_cast<std::size_t>(i)] = casts.to(inputs[static_cast<std::size_t>(i)], low, n);
  Attrs attrs = n.attrs;
  attrs.set("out_dtype", static_cast<std::int64_t>(DType::f32));
  r.emit_for(n, n.op, inputs, attrs, n.target);
}

// O2: products take every floating input in the low dtype and write it; ops that keep f32 take
// low inputs back up; the rest follow their activations: all low, so their weights go down too;
// mixed (a residual add of an f32 stream and a low branch), so the low ones go up.
// O3: every op but those without low-precision kernels takes every floating input low.
void lower_activations(passes::Rewriter& r, Casts& casts, const Graph& g, const Node& n, DType low, AmpLevel level) {
  const OpDef& def = OpRegistry::instance().get(n.op);
  std::vector<ValueId> inputs = r.map(n.inputs);
  const auto dtype = [&](std::size_t i) { return r.result().value(inputs[i]).info.dtype; };
  const auto floating = [&](std::size_t i) { return is_floating(dtype(i)) && dtype(i) != DType::f64; };
  const auto weight = [&](std::size_t i) {
    const ValueKind k = g.value(n.inputs[i]).kind;
    return k == ValueKind::parameter || k == ValueKind::constant;
  };
  Attrs attrs = n.attrs;
  const bool products = !def.autocast_inputs.empty();
  if (products || (level == AmpLevel::O3 && def.precision != Precision::f32)) {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (floating(i)) inputs[i] = casts.to(inputs[i], low, n);
    if (products) attrs.set("out_dtype", static_cast<std::int64_t>(low));
  } else if (def.precision != Precision::follows) {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (floating(i) && is_low_precision(dtype(i))) inputs[i] = casts.to(inputs[i], DType::f32, n);
  } else {
    bool any_low = false, any_f32 = false;
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (floating(i) && !weight(i)) (is_low_precision(dtype(i)) ? any_low : any_f32) = true;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!floating(i)) continue;
      if (any_low && !any_f32 && weight(i)) inputs[i] = casts.to(inputs[i], low, n);
      if (any_low && any_f32 && is_low_precision(dtype(i))) inputs[i] = casts.to(inputs[i], DType::f32, n);
    }
  }
  r.emit_retyped_for(n, n.op, inputs, attrs);
}

}  // namespace

Graph autocast(const Graph& g, DType low, AmpLevel level) {
  TROUPE_CHECK(is_low_precision(low), invalid_argument, "autocast: the low-precision dtype must be ",
               "bf16 or f16, got ", dtype_name(low));
  if (level == AmpLevel::O0) return g;
  bool f64 = false;
  for (const Value& v : g.values()) f64 = f64 || v.info.dtype == DType::f64;
  passes::Rewriter r(g);
  Casts casts(r);
  for (const Node& n : g.nodes()) {
    // O2 and O3 retype values, which a backward already taken could not follow; f64 graphs
    // (gradient checks) keep their precision there, as O1 leaves their products alone.
    const bool retypes = level >= AmpLevel::O2 && !f64;
    TROUPE_CHECK(!retypes || !n.backward, invalid_argument, "autocast ", to_string(level),
                 " rewrites the forward graph; apply it before with_gradients()");
    if (retypes)
      lower_activations(r, casts, g, n, low, level);
    else
      lower_products(r, casts, g, n, low);
  }
  return r.finish();
}

}  // namespace troupe::graph
