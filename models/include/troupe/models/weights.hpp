#pragma once
// Loading tensors from files into a model or an optimizer, with every error naming the file: a
// path that is a folder, a damaged file, a missing, unexpected or mis-shaped tensor.

#include <functional>
#include <map>
#include <string>

#include "troupe/graph/module.hpp"
#include "troupe/graph/optim.hpp"

namespace troupe::models {

/// Throws naming `path` when it is missing or a folder; `expected` says what to pass instead
/// (e.g. "--data takes a text file").
void require_file(const std::string& path, const std::string& expected);

/// The bytes of `path`; throws troupe::Error(io) naming it when it is missing, a folder or
/// unreadable, ending with `expected` (what to pass instead, e.g. "--data takes a text file").
std::string read_text_file(const std::string& path, const std::string& expected);

/// Runs `fn`; a troupe::Error it throws comes back as "'<file>' <context>: <its message>; <advice>"
/// (same kind), so the user learns which file was wrong and what to do.
void naming_file(const std::string& file, const std::string& context, const std::string& advice,
                 const std::function<void()>& fn);

/// The tensors of the .safetensors file `path`; `expected` says what to pass instead when it is
/// missing or a folder (e.g. "--load-weights takes a .safetensors file").
std::map<std::string, Tensor> read_weights(const std::string& path, const std::string& expected);

/// Copies `weights` into `model` (strict: every parameter, nothing else, same shapes); an error
/// names `file` and ends with `advice`.
void load_weights_into(graph::Module& model, const std::map<std::string, Tensor>& weights, const std::string& file,
                       const std::string& advice);

/// Restores `optimizer` from `state` read from `file`; an error names the file.
void load_optimizer_state(graph::Optimizer& optimizer, const std::map<std::string, Tensor>& state, const std::string& file);

}  // namespace troupe::models
