#pragma once
// Custom gradients. A whole function can be given as a forward and a backward callable; its forward
// runs unchanged (eager, or traced into a region of the graph) and autodiff uses the backward instead
// of differentiating the forward's ops. For one op, GradientOverride (var.hpp) swaps in a registered
// gradient rule. Inference graphs drop both, so exported models contain only the forward ops.

#include <functional>
#include <string>
#include <vector>

#include "troupe/graph/graph.hpp"
#include "troupe/graph/var.hpp"

namespace troupe::graph {

/// The forward of a custom-gradient function: outputs from inputs, built with the ops API.
using CustomForward = std::function<std::vector<Var>(const std::vector<Var>& inputs)>;

/// Runs `forward(inputs)` with `backward` as its gradient. `backward` gets the inputs, outputs and
/// output gradients in a GradContext and returns one gradient per input (undefined for none).
/// `name` appears in dumps and errors. Custom-gradient functions cannot nest.
std::vector<Var> custom_gradient(const std::string& name, const CustomForward& forward, const RegionBackward& backward,
                                 const std::vector<Var>& inputs);

/// relu forward; backward passes the gradient where x > 0 and `negative_slope` times it where x <= 0,
/// so units below zero keep learning. Exports as a plain relu.
Var custom_relu(const Var& x, double negative_slope = 0.01);

/// Name of a registered single-op gradient rule: the straight-through estimator, which passes the
/// output gradient to input 0 unchanged (for rounding or quantising ops). Use with GradientOverride.
inline constexpr const char* kStraightThrough = "straight_through";

}  // namespace troupe::graph
