#include "troupe/graph/debug.hpp"

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <strings.h>

#include "ops/op_helpers.hpp"
#include "ops/shard_rules.hpp"
#include "tape.hpp"

namespace troupe::graph {

namespace {
bool read_debug_env() {
  const char* env = std::getenv("DEBUG");
  return env && (strcasecmp(env, "true") == 0 || strcasecmp(env, "1") == 0 || strcasecmp(env, "on") == 0);
}
bool& debug_flag() {
  static bool flag = read_debug_env();
  return flag;
}

std::vector<ValueInfo> infer_debug_print(const InferContext& c) {
  detail::expect_arity(c, 1, 1);
  return detail::one(c.inputs[0].dtype, c.inputs[0].shape);
}
std::vector<Tensor> compute_debug_print(const std::vector<Tensor>& in, const ComputeContext& c) {
  std::cerr << tensor_stats(c.label, in[0]) + '\n';  // one write: op actors print from several threads
  return {in[0]};
}
// The gradient passes through and is printed as "<name>.grad" when it is computed.
std::vector<Var> grad_debug_print(const GradContext& c) {
  return {apply1("debug_print", {c.grad_output(0)}, {}, {}, c.label + ".grad")};
}
// Prints at run time whatever the switch says then: a graph traced with DEBUG on keeps its prints.
TROUPE_DEFINE_OP({.name = "debug_print", .infer = infer_debug_print, .sharding = detail::shard_pointwise,
                  .compute = compute_debug_print, .grad = grad_debug_print, .side_effects = true});
}  // namespace

bool debug_enabled() { return debug_flag(); }
void set_debug_enabled(bool on) { debug_flag() = on; }

std::string tensor_stats(const std::string& name, const Tensor& t) {
  const Tensor d = t.to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = d.data<double>();
  const std::int64_t n = d.numel();
  double sum = 0, sq = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo, abs_max = 0;
  std::int64_t nan = 0, inf = 0, finite = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(p[i])) ++nan;
    else if (std::isinf(p[i])) ++inf;
    else {
      ++finite;
      sum += p[i];
      sq += p[i] * p[i];
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
      abs_max = std::max(abs_max, std::abs(p[i]));
    }
  }
  std::ostringstream os;
  os << "[debug] " << name << ": " << dtype_name(t.dtype()) << shape_str(t.shape());
  if (finite > 0) {
    const double mean = sum / static_cast<double>(finite);
    const double var = std::max(0.0, sq / static_cast<double>(finite) - mean * mean);
    os << " mean=" << mean << " std=" << std::sqrt(var) << " min=" << lo << " max=" << hi << " max|x|=" << abs_max;
  }
  os << " nan=" << nan << " inf=" << inf;
  return os.str();
}

Var debug_print(const std::string& name, const Var& x) {
  if (!debug_flag()) return x;
  if (x.is_symbolic() || active_trace()) return apply1("debug_print", {x}, {}, {}, name);
  std::cerr << tensor_stats(name, x.tensor()) + '\n';
  if (!grad_enabled() || !tracks_grad(x)) return x;
  // Eager: the tape prints the gradient when backward reaches it (it has no node label to read).
  std::vector<Var> out{Var(x.tensor())};
  record_on_tape("debug_print", {x}, out, [name](const GradContext& c) -> std::vector<Var> {
    return {debug_print(name + ".grad", c.grad_output(0))};
  });
  return out[0];
}

}  // namespace troupe::graph
