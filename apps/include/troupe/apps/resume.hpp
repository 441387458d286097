#pragma once
// The settings of a resumed run. The checkpoint decides the model, the data and the batch; a flag
// given on the command line that contradicts it is refused (naming both values), a new --lr is
// honoured, and the run says which settings came from where.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "troupe/kernels/tensor.hpp"
#include "troupe/models/checkpoint.hpp"

namespace troupe::apps {

/// The text of `v` that reads back to the same double: how checkpoints keep real-valued settings.
std::string exact_text(double v);

/// Reconciles the flags of `app` (already parsed) with a checkpoint's state.
class ResumeSettings {
 public:
  /// `state` is the checkpoint's state (its `source` names the state.json file in errors).
  ResumeSettings(CLI::App& app, const models::CheckpointState& state);
  /// Sets `value` from the checkpoint's `key`; throws when `flag` was given with another value or
  /// the stored value is outside the flag's range.
  void take(const std::string& flag, const std::string& key, std::int64_t& value);
  void take(const std::string& flag, const std::string& key, std::uint64_t& value);
  /// Sets `value` to the checkpoint's `key` divided among `parts` (a global batch split among the
  /// run's data-parallel replicas, which may differ from the saved run's); throws when it does not
  /// divide, or when `flag` was given with another value.
  void take_divided(const std::string& flag, const std::string& key, std::int64_t parts, std::int64_t& value);
  /// As above for a number (saved as text that reads back to the same double).
  void take(const std::string& flag, const std::string& key, double& value);
  /// Whether `flag` was given on the command line.
  bool given(const std::string& flag) const { return app_.count(flag) > 0; }
  /// Whether the checkpoint holds `key` (a setting older checkpoints lack).
  bool has(const std::string& key) const { return state_.ints.count(key) || state_.strings.count(key); }
  /// As above for a string; `is_path` compares the two as file paths.
  void take(const std::string& flag, const std::string& key, std::string& value, bool is_path = false);
  /// Keeps the learning rates of a checkpoint's optimizer state ("group<k>.lr"), or sets them to
  /// `lr` when --lr was given.
  void settle_lr(std::map<std::string, Tensor>& optimizer_state, double lr);
  /// The peak rate of a scheduled run: the checkpoint's `key`, or `lr` when --lr was given (the
  /// optimizer state holds the last step's scheduled rate, not the peak).
  void settle_peak_lr(const std::string& key, double& lr);
  /// "--d-model 32, --seed 1, ..." for the start-up line: the settings that came from the
  /// checkpoint, then those the flags changed.
  std::string summary() const;

 private:
  void check_range(const std::string& flag, const std::string& key, const std::string& text);
  void agree(const std::string& flag, const std::string& key, bool same, const std::string& stored);
  CLI::App& app_;
  const models::CheckpointState& state_;
  std::vector<std::string> from_checkpoint_, from_flags_;
};

}  // namespace troupe::apps
