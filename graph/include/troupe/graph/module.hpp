#pragma once
// Module: a named tree of parameters (PyTorch's nn.Module, without the magic). Parameters are eager
// leaves whose names are their dotted paths from the root ("blocks.0.attn.qkv.weight"), so traces,
// state dicts, safetensors files and optimizers all agree on them.

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "troupe/graph/var.hpp"

namespace troupe::graph {

/// Base of every model component: owns parameters and child modules.
class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Every parameter with its dotted name: own parameters first, then each child's, in registration order.
  std::vector<std::pair<std::string, Var>> named_parameters() const;
  /// The parameters of named_parameters(), in the same order.
  std::vector<Var> parameters() const;
  /// Total number of parameter elements.
  std::int64_t parameter_count() const;
  /// Parameter values by dotted name (the tensors themselves, not copies).
  std::map<std::string, Tensor> state_dict() const;
  /// Copies `state` into the parameters in place. Every parameter must be present with its shape and
  /// dtype, and (when `strict`) no unknown names may appear; errors list what is missing or unexpected.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  /// Writes the parameters to a safetensors file.
  void save(const std::string& path) const;
  /// Reads parameters from a safetensors file (strict, as load_state_dict).
  void load(const std::string& path);
  /// Converts every parameter to `dtype` in place (f64 for gradient checks, bf16 for serving);
  /// gradients are dropped.
  void to(DType dtype) const;
  /// Forgets the gradients of all parameters.
  void zero_grad() const;
  /// Training mode (the default) or, with false, evaluation, for it and its children: dropout
  /// draws only while training (torch's train() and eval()).
  void train(bool on = true);
  /// Whether it is in training mode.
  bool training() const { return training_; }
  /// Its dotted path from the root ("blocks.0.attn"; empty for the root), which names its dropout sites.
  const std::string& path() const { return path_; }

 protected:
  /// Adds a trainable parameter called `name` with initial value `init`; returns its handle.
  Var register_parameter(const std::string& name, const Tensor& init);
  /// Adds a child module called `name`; its parameters are renamed to "<name>.<their name>".
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    add_child(name, child);
    return child;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  void prefix_names(const std::string& prefix);
  std::vector<std::pair<std::string, Var>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::string path_;  // dotted path from the root, so parts added after registration are named in full
  bool training_ = true;
};

/// A module with one input and one output, so layers chain in a Sequential.
class Layer : public Module {
 public:
  /// The computation, written with the ops API (runs eagerly or traces).
  virtual Var forward(const Var& x) = 0;
  /// Shorthand for forward(x).
  Var operator()(const Var& x) { return forward(x); }
};

}  // namespace troupe::graph
