#include "troupe/apps/grad_mode.hpp"

#include <cstdlib>

#include "troupe/kernels/error.hpp"

namespace troupe::apps {

GradMode grad_mode() {
  const char* env = std::getenv("GRAD_MODE");
  if (!env || !*env) return GradMode::advanced;
  const std::string v = env;
  if (v == "advanced") return GradMode::advanced;
  if (v == "standard") return GradMode::standard;
  fail(ErrorKind::invalid_argument, "GRAD_MODE='", v, "' is not a gradient mode; use advanced (the default) or standard");
}

const char* to_string(GradMode mode) { return mode == GradMode::advanced ? "advanced" : "standard"; }

actors::ClipMode clip_mode(GradMode mode) {
  return mode == GradMode::advanced ? actors::ClipMode::parallel : actors::ClipMode::naive;
}

}  // namespace troupe::apps
