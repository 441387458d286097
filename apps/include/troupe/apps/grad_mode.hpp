#pragma once
// GRAD_MODE: which gradient path the applications take. "advanced" (the default) uses custom
// gradients where a model asks for them (the leaky custom ReLU of troupe-sr) and the parallel
// clip path (gradient stages take their norms while backward runs); "standard" uses the plain
// gradient and the naive clip (one norm pass after the step).

#include <string>

#include "troupe/actors/program.hpp"

namespace troupe::apps {

/// The two gradient paths.
enum class GradMode { advanced, standard };

/// GRAD_MODE from the environment; unset means advanced; any other value is an error saying so.
GradMode grad_mode();
/// "advanced" or "standard".
const char* to_string(GradMode mode);
/// The runtime's clip path for `mode`.
actors::ClipMode clip_mode(GradMode mode);

}  // namespace troupe::apps
