#include <algorithm>
#include <sstream>

#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

bool OpDef::differentiable(std::size_t i) const {
  return std::find(nondiff_inputs.begin(), nondiff_inputs.end(), static_cast<int>(i)) == nondiff_inputs.end();
}

GradFn missing_gradient(const std::string& op) {
  return [op](const GradContext&) -> std::vector<Var> {
    fail(ErrorKind::unsupported, "op '", op, "' has no gradient rule, but a gradient must flow through it",
         " (higher-order gradients are not supported); wrap it in stop_gradient() or give it a custom gradient");
  };
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add(OpDef def) {
  TROUPE_CHECK(def.infer && def.compute, invalid_argument, "op '", def.name, "' needs inference and compute");
  const std::string name = def.name;
  TROUPE_CHECK(ops_.emplace(name, std::move(def)).second, invalid_argument, "op '", name, "' is defined twice");
}

const OpDef& OpRegistry::get(const std::string& op) const {
  auto it = ops_.find(op);
  if (it != ops_.end()) return it->second;
  std::ostringstream known;
  for (const auto& [name, def] : ops_) known << ' ' << name;
  fail(ErrorKind::invalid_argument, "unknown op '", op, "'; defined ops:", known.str());
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, def] : ops_) out.push_back(name);
  return out;
}

void OpRegistry::add_gradient(const std::string& name, GradFn fn) {
  TROUPE_CHECK(fn != nullptr, invalid_argument, "gradient '", name, "' is empty");
  TROUPE_CHECK(gradients_.emplace(name, std::move(fn)).second, invalid_argument, "gradient '", name,
               "' is registered twice");
}

const GradFn& OpRegistry::gradient(const std::string& name) const {
  auto it = gradients_.find(name);
  if (it != gradients_.end()) return it->second;
  std::ostringstream known;
  for (const auto& [n, fn] : gradients_) known << ' ' << n;
  fail(ErrorKind::invalid_argument, "unknown gradient rule '", name, "'; registered:", known.str());
}

}  // namespace troupe::graph
