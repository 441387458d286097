#pragma once
// Learning-rate schedules: a linear warm-up from zero to the optimizer's own rate (the peak), then
// a cosine or linear decay to a floor, held after the decay's last update. The rate of an update
// depends only on its number, so a resumed run continues the curve exactly.

#include <cstdint>
#include <string>

namespace troupe::graph {

/// The shape of the decay after warm-up.
enum class LrDecay {
  constant,  // the peak throughout
  cosine,    // half a cosine from the peak down to min_lr
  linear,    // a straight line from the peak down to min_lr
};

/// The decay named `name` ("constant", "cosine", "linear"); throws naming the choices otherwise.
LrDecay parse_lr_decay(const std::string& name);
/// The name parse_lr_decay reads.
const char* lr_decay_name(LrDecay decay);

/// A warm-up and decay schedule over a run's updates, numbered from 1.
struct LrSchedule {
  LrDecay decay = LrDecay::constant;
  std::int64_t warmup_steps = 0;  // updates over which the rate rises linearly to the peak (update k: peak k / warmup)
  std::int64_t decay_steps = 0;   // the update at which the decay reaches min_lr (the run's length)
  double min_lr = 0;              // the floor, for a peak of `peak`; other peaks keep their ratio to it

  /// The rate of update `step` for an optimizer group whose rate is `peak`. Throws on settings
  /// that describe no schedule (negative counts, a floor above the peak, decay ending in warm-up).
  double lr(double peak, std::int64_t step) const;
  /// Checks the settings against a peak of `peak`; throws one line naming the setting and what to do.
  void check(double peak) const;
  /// Whether it changes the rate at all.
  bool active() const { return decay != LrDecay::constant || warmup_steps > 0; }
};

}  // namespace troupe::graph
