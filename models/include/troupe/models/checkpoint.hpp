#pragma once
// Training checkpoints: parameters, optimizer state and the run's own state (step, data position,
// RNG offsets, model config) in one folder per save. A save is written to a temporary folder,
// fsynced and renamed, then the "latest" pointer file is replaced atomically, so a crash at any
// moment leaves the previous checkpoint intact and never a half-written one.

#include <cstdint>
#include <map>
#include <string>

#include "troupe/kernels/tensor.hpp"

namespace troupe::models {

/// What a checkpoint holds besides tensors: free-form named integers and strings (step, data
/// position, config, ...), stored as JSON.
struct CheckpointState {
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, std::string> strings;
  /// The integer `key`; throws naming the checkpoint when absent.
  std::int64_t int_at(const std::string& key) const;
  /// The string `key`; throws naming the checkpoint when absent.
  const std::string& string_at(const std::string& key) const;
  std::string source;  // the state.json it was read from, for errors
};

/// A checkpoint read back.
struct Checkpoint {
  std::string folder;  // the step-<N> folder `latest` named
  std::map<std::string, Tensor> model, optimizer;
  CheckpointState state;
};

/// Saves under `dir` (created if needed) as step-<step>/ and points dir/latest at it; keeps this
/// save and the `keep` - 1 other saves of highest step, and deletes the rest.
void save_checkpoint(const std::string& dir, std::int64_t step, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const CheckpointState& state, int keep = 2);

/// Checks, before training, that a run may save into `dir`: refuses a folder that already holds
/// a run unless it is `resume` (the folder being continued), a file, and a folder that cannot be
/// created or written to (tried with a probe file). Creates the folder.
void prepare_save_folder(const std::string& dir, const std::string& resume);

/// Reads the checkpoint dir/latest points at; throws naming the folder when there is none, it is
/// damaged, or (with `app` given) it was written by another application (its "app" string).
Checkpoint load_checkpoint(const std::string& dir, const std::string& app = "");

}  // namespace troupe::models
