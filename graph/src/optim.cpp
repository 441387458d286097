#include "troupe/graph/optim.hpp"

#include <cmath>
#include <set>

#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
// The gradient of `p` if it can be applied; undefined if there is none. Throws on a mismatch.
Tensor usable_grad(const Var& p, const char* optimizer) {
  const Tensor& g = p.grad();
  if (!g.defined()) return g;
  TROUPE_CHECK(g.shape() == p.tensor().shape() && g.dtype() == p.tensor().dtype(), shape_mismatch, optimizer,
               ": gradient of '", p.name(), "' is ", g.str(), " but the parameter is ", p.tensor().str());
  return g.contiguous();
}
}  // namespace

void Optimizer::zero_grad() const {
  for (const Var& p : all_params_) p.zero_grad();
}

void Optimizer::add_params(const std::vector<Var>& params, const char* optimizer) {
  std::set<std::string> names;
  for (const Var& p : all_params_) names.insert(p.name());
  for (const Var& p : params) {
    TROUPE_CHECK(p.requires_grad(), invalid_argument, optimizer, ": '", p.name(),
                 "' is not a trainable parameter (make it with Var::leaf or Module::register_parameter)");
    TROUPE_CHECK(!p.name().empty(), invalid_argument, optimizer,
                 ": every parameter needs a name (it keys the optimizer state)");
    TROUPE_CHECK(names.insert(p.name()).second, invalid_argument, optimizer, ": parameter '", p.name(),
                 "' appears twice (in one group or in two)");
    all_params_.push_back(p);
  }
}

std::vector<Optimizer::Slot>& Optimizer::state_of(const Var& p, const std::vector<std::string>& slots) {
  auto& state = state_[p.key()];
  if (state.empty())
    for (const auto& name : slots)
      state.push_back({name, Tensor::zeros(p.tensor().shape(), p.tensor().dtype(), p.tensor().device())});
  return state;
}

std::int64_t Optimizer::next_step(const Var& p) { return ++steps_[p.key()]; }

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const Var& p : all_params_) {
    auto it = state_.find(p.key());
    if (it != state_.end())
      for (const Slot& s : it->second) out[p.name() + "." + s.name] = s.value.clone();
    auto st = steps_.find(p.key());
    if (st != steps_.end()) out[p.name() + ".step"] = Tensor::from_vector<std::int64_t>({st->second}, {});
  }
  for (std::size_t g = 0; g < group_count(); ++g) out["group" + std::to_string(g) + ".lr"] = Tensor::scalar(lr(g), DType::f64);
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::set<std::string> used;
  for (std::size_t g = 0; g < group_count(); ++g) {
    const std::string key = "group" + std::to_string(g) + ".lr";
    auto it = state.find(key);
    TROUPE_CHECK(it != state.end(), invalid_argument, "optimizer load_state_dict: '", key,
                 "' is missing; the state comes from an optimizer with fewer groups");
    used.insert(key);
  }
  // Validate first so a bad state leaves the optimizer as it was.
  for (const auto& [key, t] : state) {
    if (used.count(key)) continue;
    bool known = false;
    for (const Var& p : all_params_) {
      if (key.rfind(p.name() + ".", 0) != 0) continue;
      const std::string slot = key.substr(p.name().size() + 1);
      if (slot.find('.') != std::string::npos) continue;  // belongs to a longer name
      known = true;
      if (slot == "step")
        TROUPE_CHECK(t.dtype() == DType::i64 && t.numel() == 1, invalid_argument, "optimizer load_state_dict: '", key,
                     "' must be one i64");
      else
        TROUPE_CHECK(t.shape() == p.tensor().shape() && t.dtype() == p.tensor().dtype(), shape_mismatch,
                     "optimizer load_state_dict: '", key, "' is ", t.str(), " but parameter '", p.name(), "' is ",
                     p.tensor().str());
    }
    TROUPE_CHECK(known, invalid_argument, "optimizer load_state_dict: '", key,
                 "' belongs to no parameter of this optimizer");
  }
  for (std::size_t g = 0; g < group_count(); ++g)
    set_lr(state.at("group" + std::to_string(g) + ".lr").to(DType::f64).data<double>()[0], g);
  state_.clear();
  steps_.clear();
  for (const Var& p : all_params_) {
    for (const auto& [key, t] : state) {
      if (key.rfind(p.name() + ".", 0) != 0) continue;
      const std::string slot = key.substr(p.name().size() + 1);
      if (slot.find('.') != std::string::npos) continue;
      if (slot == "step") steps_[p.key()] = t.contiguous().data<std::int64_t>()[0];
      else state_[p.key()].push_back({slot, t.clone()});
    }
  }
}

void SGD::step() {
  NoGradGuard no_grad;
  for (const auto& group : groups_)
    for (const Var& p : group.params) {
      const Tensor g = usable_grad(p, "SGD");
      if (!g.defined()) continue;
      const bool first = next_step(p) == 1;
      ops::sgd_update_(p.tensor(), g, state_of(p, {"momentum_buffer"})[0].value, group.options, first);
    }
}

void AdamW::step() {
  NoGradGuard no_grad;
  for (const auto& group : groups_)
    for (const Var& p : group.params) {
      const Tensor g = usable_grad(p, "AdamW");
      if (!g.defined()) continue;
      auto& slots = state_of(p, {"exp_avg", "exp_avg_sq"});
      ops::adamw_update_(p.tensor(), g, slots[0].value, slots[1].value, group.options, next_step(p));
    }
}

double clip_grad_norm(const std::vector<Var>& params, double max_norm) {
  double total = 0;
  for (const Var& p : params)
    if (p.grad().defined()) total += ops::squared_norm(p.grad());
  const double norm = std::sqrt(total);
  const double scale = ops::clip_coefficient(norm, max_norm);
  if (scale != 1.0)
    for (const Var& p : params)
      if (p.grad().defined()) p.set_grad(ops::mul(p.grad(), scale));  // out of place: grads may share storage
  return norm;
}

}  // namespace troupe::graph
