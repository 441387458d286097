#pragma once
// Optimizers over parameter groups (torch.optim style): each group has its own hyper-parameters,
// each parameter its own state. step() runs the fused update kernels in place on the parameters'
// tensors; state_dict() holds everything needed to resume (moments, step counts, learning rates).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "troupe/graph/var.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::graph {

/// Scales the gradients of `params` in place so that their global L2 norm is at most `max_norm`
/// (torch.nn.utils.clip_grad_norm_); parameters without a gradient are skipped. Returns the norm
/// before clipping.
double clip_grad_norm(const std::vector<Var>& params, double max_norm);

/// Parameters that share hyper-parameters `options`.
template <class Options>
struct ParamGroup {
  std::vector<Var> params;
  Options options;
};

/// What SGD and AdamW share: groups, zero_grad, state (de)serialisation by parameter name.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Applies one update to every parameter that has a gradient.
  void step() { step(1.0); }
  /// The update with every gradient multiplied by `gradient_scale` as the kernels read it (a clip's
  /// coefficient): the bits of scaling the gradients first and then step(), without that pass over
  /// them, and the gradients left as they were.
  virtual void step(double gradient_scale) = 0;
  /// Forgets the gradients of all parameters.
  void zero_grad() const;
  /// Every parameter of every group.
  const std::vector<Var>& parameters() const { return all_params_; }
  /// The names of the state slots each stepped parameter has ("exp_avg", "exp_avg_sq" for AdamW).
  std::vector<std::string> slots() const { return slot_names(); }
  /// Number of parameter groups, each with its own learning rate.
  std::size_t groups() const { return group_count(); }
  /// Learning rate of group `g` (schedulers read and set it).
  virtual double lr(std::size_t group = 0) const = 0;
  virtual void set_lr(double lr, std::size_t group = 0) = 0;
  /// Per-parameter state and per-group learning rates, keyed "<param name>.<slot>" and "group<k>.lr".
  std::map<std::string, Tensor> state_dict() const;
  /// Restores what state_dict() produced. Every entry is checked before anything changes: names
  /// must match this optimizer's parameters, each parameter has all of its slots and a step or
  /// none, slots match the parameter's shape and dtype, steps are one non-negative i64, and each
  /// group's lr is one finite, non-negative number.
  void load_state_dict(const std::map<std::string, Tensor>& state);
  /// The same optimizer (its kind and each group's hyper-parameters) over other parameters: group
  /// k's are `params(group k's parameters)`; no state is carried over. ZeRO-1 steps each rank's
  /// pieces of the parameters with it.
  virtual std::shared_ptr<Optimizer> regrouped(const std::function<std::vector<Var>(const std::vector<Var>&)>& params) const = 0;

 protected:
  /// One named state tensor of one parameter (momentum buffer, Adam moments, ...).
  struct Slot {
    std::string name;
    Tensor value;
  };
  /// The state of parameter `p`, created on first use as zeros named `slots`.
  std::vector<Slot>& state_of(const Var& p, const std::vector<std::string>& slots);
  /// Adds the parameters of one group; names must be unique across groups (they key the state).
  void add_params(const std::vector<Var>& params, const char* optimizer);
  /// Steps taken by parameter `p`, after incrementing it.
  std::int64_t next_step(const Var& p);

 private:
  virtual std::size_t group_count() const = 0;
  /// The state slots every stepped parameter has (what step() passes to state_of).
  virtual std::vector<std::string> slot_names() const = 0;
  std::vector<Var> all_params_;
  std::map<const VarImpl*, std::vector<Slot>> state_;
  std::map<const VarImpl*, std::int64_t> steps_;
};

/// The group bookkeeping SGD and AdamW share: groups of one Options type and their learning rates.
template <class Options>
class GroupedOptimizer : public Optimizer {
 public:
  double lr(std::size_t group = 0) const override { return groups_.at(group).options.lr; }
  void set_lr(double lr, std::size_t group = 0) override { groups_.at(group).options.lr = lr; }
  std::shared_ptr<Optimizer> regrouped(const std::function<std::vector<Var>(const std::vector<Var>&)>& params) const override {
    std::vector<ParamGroup<Options>> groups = groups_;
    for (ParamGroup<Options>& g : groups) g.params = params(g.params);
    return make(std::move(groups));
  }

 protected:
  GroupedOptimizer(std::vector<ParamGroup<Options>> groups, const char* name) : groups_(std::move(groups)) {
    for (const auto& g : groups_) add_params(g.params, name);
  }
  /// An optimizer of the derived kind over `groups`.
  virtual std::shared_ptr<Optimizer> make(std::vector<ParamGroup<Options>> groups) const = 0;
  std::vector<ParamGroup<Options>> groups_;

 private:
  std::size_t group_count() const override { return groups_.size(); }
};

/// Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay.
class SGD : public GroupedOptimizer<kernels::SgdParams> {
 public:
  explicit SGD(std::vector<ParamGroup<kernels::SgdParams>> groups) : GroupedOptimizer(std::move(groups), "SGD") {}
  SGD(const std::vector<Var>& params, const kernels::SgdParams& options) : SGD({{params, options}}) {}
  using Optimizer::step;
  void step(double gradient_scale) override;

 private:
  std::shared_ptr<Optimizer> make(std::vector<ParamGroup<kernels::SgdParams>> groups) const override {
    return std::make_shared<SGD>(std::move(groups));
  }
  std::vector<std::string> slot_names() const override { return {"momentum_buffer"}; }
};

/// Adam with decoupled weight decay (Loshchilov & Hutter), bias-corrected per parameter step.
class AdamW : public GroupedOptimizer<kernels::AdamWParams> {
 public:
  explicit AdamW(std::vector<ParamGroup<kernels::AdamWParams>> groups) : GroupedOptimizer(std::move(groups), "AdamW") {}
  AdamW(const std::vector<Var>& params, const kernels::AdamWParams& options) : AdamW({{params, options}}) {}
  using Optimizer::step;
  void step(double gradient_scale) override;

 private:
  std::shared_ptr<Optimizer> make(std::vector<ParamGroup<kernels::AdamWParams>> groups) const override {
    return std::make_shared<AdamW>(std::move(groups));
  }
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_avg_sq"}; }
};

}  // namespace troupe::graph
