#include "troupe/graph/module.hpp"

#include <set>
#include <sstream>

#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

std::vector<std::pair<std::string, Var>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Var>> out;
  for (const auto& [name, p] : params_) out.emplace_back(p.name(), p);
  for (const auto& [name, child] : children_)
    for (auto& np : child->named_parameters()) out.push_back(std::move(np));
  return out;
}

std::vector<Var> Module::parameters() const {
  std::vector<Var> out;
  for (const auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::int64_t Module::parameter_count() const {
  std::int64_t n = 0;
  for (const Var& p : parameters()) n += p.tensor().numel();
  return n;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : named_parameters()) out.emplace(name, p.tensor());
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  const auto named = named_parameters();
  std::vector<std::string> missing, unexpected;
  std::set<std::string> known;
  for (const auto& [name, p] : named) {
    known.insert(name);
    if (!state.count(name)) missing.push_back(name);
  }
  for (const auto& [name, t] : state)
    if (!known.count(name)) unexpected.push_back(name);
  auto list = [](const std::vector<std::string>& names) {
    std::ostringstream os;
    for (std::size_t i = 0; i < names.size() && i < 8; ++i) os << (i ? ", " : "") << printable(names[i]);
    if (names.size() > 8) os << ", ... (" << names.size() << " in all)";
    return os.str();
  };
  TROUPE_CHECK(missing.empty(), invalid_argument, "load_state_dict: missing parameters: ", list(missing));
  TROUPE_CHECK(!strict || unexpected.empty(), invalid_argument, "load_state_dict: unexpected entries: ",
               list(unexpected), " (pass strict=false to ignore them)");
  // Check everything before copying anything, so a bad state dict leaves the module untouched.
  for (const auto& [name, p] : named) {
    const Tensor& src = state.at(name);
    TROUPE_CHECK(src.shape() == p.tensor().shape() && src.dtype() == p.tensor().dtype(), shape_mismatch,
                 "load_state_dict: parameter '", name, "' is ", p.tensor().str(), " but the state holds ", src.str());
  }
  for (const auto& [name, p] : named) {
    Tensor dst = p.tensor();  // shares storage: the copy lands in the parameter
    dst.copy_from(state.at(name));
  }
}

void Module::save(const std::string& path) const { save_safetensors(path, state_dict(), {{"format", "troupe"}}); }

void Module::load(const std::string& path) {
  try {
    load_state_dict(load_safetensors(path).tensors);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::io) throw;
    fail(e.kind(), path, ": ", e.message());
  }
}

void Module::to(DType dtype) const {
  for (const Var& p : parameters()) {
    TROUPE_CHECK(is_floating(dtype), dtype_mismatch, "Module::to: parameters must stay floating, not ",
                 dtype_name(dtype));
    VarImpl& impl = p.impl();
    impl.value = impl.value.to(dtype).contiguous();
    impl.info.dtype = dtype;
    impl.grad = Tensor();
  }
}

void Module::zero_grad() const {
  for (const Var& p : parameters()) p.zero_grad();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Var Module::register_parameter(const std::string& name, const Tensor& init) {
  TROUPE_CHECK(!name.empty() && name.find('.') == std::string::npos, invalid_argument, "parameter name '", name,
               "' must be non-empty and contain no '.'");
  for (const auto& [n, p] : params_)
    TROUPE_CHECK(n != name, invalid_argument, "parameter '", name, "' is registered twice");
  Var v = Var::leaf(init, path_.empty() ? name : path_ + "." + name);
  params_.emplace_back(name, v);
  return v;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  TROUPE_CHECK(child, invalid_argument, "module '", name, "' is null");
  TROUPE_CHECK(!name.empty() && name.find('.') == std::string::npos, invalid_argument, "module name '", name,
               "' must be non-empty and contain no '.'");
  for (const auto& [n, c] : children_)
    TROUPE_CHECK(n != name, invalid_argument, "module '", name, "' is registered twice");
  child->prefix_names(path_.empty() ? name : path_ + "." + name);
  children_.emplace_back(name, std::move(child));
}

void Module::prefix_names(const std::string& prefix) {
  path_ = path_.empty() ? prefix : prefix + "." + path_;
  for (auto& [n, p] : params_) p.impl().name = prefix + "." + p.name();
  for (auto& [n, c] : children_) c->prefix_names(prefix);
}

}  // namespace troupe::graph
