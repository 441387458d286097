#pragma once
// Dynamic loss scaling for low-precision gradients (torch.cuda.amp.GradScaler's rule): the backward
// starts from the scale instead of 1, so small gradients stay above f16's underflow; before the
// update the gradients are divided by it again (before clipping), and a step whose gradients hold an
// Inf or NaN is skipped and the scale halved. After `growth_interval` clean steps in a row the scale
// doubles. f16 needs it; bf16 has f32's exponent range and runs without it unless asked.
// MindSpore's DynamicLossScaleManager starts at 2^24 and grows after 1000 steps; these are
// PyTorch's defaults.

#include <cstdint>
#include <map>
#include <string>

#include "troupe/graph/var.hpp"

namespace troupe::graph {

/// The scaler's rule.
struct GradScalerOptions {
  double init_scale = 65536.0;         // 2^16
  double growth_factor = 2.0;          // after growth_interval clean steps
  double backoff_factor = 0.5;         // after a step with an Inf or NaN gradient
  std::int64_t growth_interval = 2000;
};

/// The loss scale and its update rule; the scale lives in a 0-d f32 Var that a traced backward
/// reads as its seed (TracedFunction::with_gradients), so changing it needs no recompilation.
class GradScaler {
 public:
  /// Checks the options (a positive finite scale, growth > 1, backoff in (0, 1), interval >= 1).
  explicit GradScaler(GradScalerOptions options = {});
  /// The current scale.
  double scale() const { return scale_; }
  /// The 0-d f32 Var holding the scale: the seed of the scaled backward.
  const Var& scale_var() const { return var_; }
  /// Records a step's outcome: with an Inf or NaN gradient (`found_inf`) the step was skipped and the
  /// scale backs off; otherwise, every growth_interval clean steps in a row, it grows.
  void update(bool found_inf);
  /// Clean steps since the last growth or backoff.
  std::int64_t growth_tracker() const { return tracker_; }
  /// Steps skipped so far (restored with the state).
  std::int64_t skipped_steps() const { return skipped_; }
  /// Everything needed to resume: "scale" (exact), "growth_tracker" and "skipped" as text.
  std::map<std::string, std::string> state_dict() const;
  /// Restores what state_dict() produced; checks every entry before anything changes and names
  /// the bad one.
  void load_state_dict(const std::map<std::string, std::string>& state);

 private:
  void set_scale(double s);
  GradScalerOptions options_;
  double scale_;
  std::int64_t tracker_ = 0, skipped_ = 0;
  Var var_;
};

}  // namespace troupe::graph
