#include "troupe/graph/grad_scaler.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The number `key` of a scaler state; an Error names the key and what was wrong.
double number_at(const std::map<std::string, std::string>& state, const std::string& key) {
  auto it = state.find(key);
  TROUPE_CHECK(it != state.end(), invalid_argument, "loss scaler state: '", key, "' is missing");
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  TROUPE_CHECK(!it->second.empty() && *end == '\0' && std::isfinite(v) && v >= 0, invalid_argument,
               "loss scaler state: '", key, "' is '", it->second, "', not a finite number >= 0");
  return v;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  TROUPE_CHECK(std::isfinite(options_.init_scale) && options_.init_scale > 0, invalid_argument,
               "GradScaler: init_scale must be a finite number > 0, got ", options_.init_scale);
  TROUPE_CHECK(std::isfinite(options_.growth_factor) && options_.growth_factor > 1, invalid_argument,
               "GradScaler: growth_factor must be > 1, got ", options_.growth_factor);
  TROUPE_CHECK(options_.backoff_factor > 0 && options_.backoff_factor < 1, invalid_argument,
               "GradScaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor);
  TROUPE_CHECK(options_.growth_interval >= 1, invalid_argument, "GradScaler: growth_interval must be >= 1, got ",
               options_.growth_interval);
  var_ = Var::leaf(Tensor::scalar(scale_), "loss_scale");
}

void GradScaler::set_scale(double s) {
  scale_ = s;
  // In place: a traced step snapshots the tensor handle at its start, and updates come between steps.
  var_.tensor().data<float>()[0] = static_cast<float>(s);
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    ++skipped_;
    tracker_ = 0;
    return set_scale(scale_ * options_.backoff_factor);
  }
  if (++tracker_ < options_.growth_interval) return;
  tracker_ = 0;
  const double grown = scale_ * options_.growth_factor;
  if (std::isfinite(static_cast<float>(grown))) set_scale(grown);  // never grow into an Inf seed
}

std::map<std::string, std::string> GradScaler::state_dict() const {
  return {{"scale", exact(scale_)}, {"growth_tracker", std::to_string(tracker_)}, {"skipped", std::to_string(skipped_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, std::string>& state) {
  const double scale = number_at(state, "scale");
  TROUPE_CHECK(scale > 0, invalid_argument, "loss scaler state: 'scale' must be > 0");
  const double tracker = number_at(state, "growth_tracker"), skipped = number_at(state, "skipped");
  TROUPE_CHECK(tracker == std::floor(tracker) && skipped == std::floor(skipped), invalid_argument,
               "loss scaler state: 'growth_tracker' and 'skipped' must be whole numbers");
  set_scale(scale);
  tracker_ = static_cast<std::int64_t>(tracker);
  skipped_ = static_cast<std::int64_t>(skipped);
}

}  // namespace troupe::graph
