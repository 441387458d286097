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
  static const char* where = "optimizer load_state_dict";
  // Validate everything first so a bad state leaves the optimizer as it was.
  std::vector<double> lrs;
  for (std::size_t g = 0; g < group_count(); ++g) {
    const std::string key = "group" + std::to_string(g) + ".lr";
    auto it = state.find(key);
    TROUPE_CHECK(it != state.end(), invalid_argument, where, ": '", key,
                 "' is missing; the state comes from an optimizer with fewer groups");
    const Tensor& t = it->second;
    TROUPE_CHECK(is_floating(t.dtype()) && t.numel() == 1, invalid_argument, where, ": '", key,
                 "' must be one floating-point number but is ", t.str());
    const double lr = t.to(DType::f64).contiguous().data<double>()[0];
    TROUPE_CHECK(std::isfinite(lr) && lr >= 0, invalid_argument, where, ": '", key, "' is ", lr,
                 "; a learning rate must be finite and non-negative");
    lrs.push_back(lr);
  }
  const std::vector<std::string> slots = slot_names();
  std::size_t used = lrs.size();
  for (const Var& p : all_params_) {
    const auto step = state.find(p.name() + ".step");
    std::size_t present = step != state.end();
    if (present) {
      const Tensor& t = step->second;
      TROUPE_CHECK(t.dtype() == DType::i64 && t.numel() == 1, invalid_argument, where, ": '", step->first,
                   "' must be one i64 but is ", t.str());
      const std::int64_t n = t.contiguous().data<std::int64_t>()[0];
      TROUPE_CHECK(n >= 0, invalid_argument, where, ": '", step->first, "' is ", n, "; a step count cannot be negative");
    }
    for (const std::string& slot : slots) {
      const auto it = state.find(p.name() + "." + slot);
      if (it == state.end()) continue;
      ++present;
      TROUPE_CHECK(it->second.shape() == p.tensor().shape() && it->second.dtype() == p.tensor().dtype(), shape_mismatch,
                   where, ": '", it->first, "' is ", it->second.str(), " but parameter '", p.name(), "' is ",
                   p.tensor().str());
    }
    // A parameter never stepped has no state; one stepped has all of it (a half state would make
    // step() index a slot that is not there).
    TROUPE_CHECK(present == 0 || present == slots.size() + 1, invalid_argument, where, ": parameter '", p.name(),
                 "' has ", present, " of its ", slots.size() + 1, " state entries (step and ", slots.size(),
                 " slots); the state is incomplete");
    used += present;
  }
  if (used != state.size()) {
    std::set<std::string> known;
    for (std::size_t g = 0; g < lrs.size(); ++g) known.insert("group" + std::to_string(g) + ".lr");
    for (const Var& p : all_params_) {
      known.insert(p.name() + ".step");
      for (const std::string& slot : slots) known.insert(p.name() + "." + slot);
    }
    for (const auto& entry : state)
      TROUPE_CHECK(known.count(entry.first), invalid_argument, where, ": '", printable(entry.first),
                   "' belongs to no parameter or group of this optimizer");
  }

  for (std::size_t g = 0; g < lrs.size(); ++g) set_lr(lrs[g], g);
  state_.clear();
  steps_.clear();
  for (const Var& p : all_params_) {
    const auto step = state.find(p.name() + ".step");
    if (step == state.end()) continue;
    steps_[p.key()] = step->second.contiguous().data<std::int64_t>()[0];
    auto& loaded = state_[p.key()];
    for (const std::string& slot : slots) loaded.push_back({slot, state.at(p.name() + "." + slot).contiguous().clone()});
  }
}

void SGD::step(double gradient_scale) {
  NoGradGuard no_grad;
  for (const auto& group : groups_)
    for (const Var& p : group.params) {
      const Tensor g = usable_grad(p, "SGD");
      if (!g.defined()) continue;
      const bool first = next_step(p) == 1;
      kernels::sgd_update_(p.tensor(), g, state_of(p, slot_names())[0].value, group.options, first, gradient_scale);
    }
}

void AdamW::step(double gradient_scale) {
  NoGradGuard no_grad;
  for (const auto& group : groups_)
    for (const Var& p : group.params) {
      const Tensor g = usable_grad(p, "AdamW");
      if (!g.defined()) continue;
      auto& slots = state_of(p, slot_names());
      kernels::adamw_update_(p.tensor(), g, slots[0].value, slots[1].value, group.options, next_step(p), gradient_scale);
    }
}

double clip_grad_norm(const std::vector<Var>& params, double max_norm) {
  double total = 0;
  for (const Var& p : params)
    if (p.grad().defined()) total += kernels::squared_norm(p.grad());
  const double norm = std::sqrt(total);
  const double scale = kernels::clip_coefficient(norm, max_norm);
  if (scale != 1.0)
    for (const Var& p : params)
      if (p.grad().defined()) p.set_grad(kernels::mul(p.grad(), scale));  // out of place: grads may share storage
  return norm;
}

}  // namespace troupe::graph
