#include "troupe/graph/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "troupe/kernels/error.hpp"

namespace troupe::graph {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "constant") return LrDecay::constant;
  if (name == "cosine") return LrDecay::cosine;
  if (name == "linear") return LrDecay::linear;
  fail(ErrorKind::invalid_argument, "unknown learning-rate schedule '", printable(name), "'; use constant, cosine or linear");
}

const char* lr_decay_name(LrDecay decay) {
  switch (decay) {
    case LrDecay::constant: return "constant";
    case LrDecay::cosine: return "cosine";
    case LrDecay::linear: return "linear";
  }
  return "?";
}

void LrSchedule::check(double peak) const {
  TROUPE_CHECK(warmup_steps >= 0, invalid_argument, "learning-rate warm-up of ", warmup_steps,
               " steps; give 0 or more warm-up steps");
  TROUPE_CHECK(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= peak, invalid_argument, "the learning-rate floor ",
               min_lr, " is not between 0 and the peak rate ", peak, "; give a smaller --min-lr");
  TROUPE_CHECK(decay == LrDecay::constant || decay_steps > warmup_steps, invalid_argument, "the ",
               lr_decay_name(decay), " decay ends at step ", decay_steps, ", within the ", warmup_steps,
               " warm-up steps; give fewer warm-up steps or more steps");
}

double LrSchedule::lr(double peak, std::int64_t step) const {
  check(peak);
  if (step <= warmup_steps) return peak * static_cast<double>(std::max<std::int64_t>(step, 0)) / static_cast<double>(warmup_steps);
  if (decay == LrDecay::constant) return peak;
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - warmup_steps));
  const double shape = decay == LrDecay::cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
  return min_lr + (peak - min_lr) * shape;
}

}  // namespace troupe::graph
