#pragma once
// Debug prints of tensor statistics, switched by the DEBUG environment variable (true/1/on).
// When off, debug_print costs one branch and adds nothing to traced graphs.

#include <string>

#include "troupe/graph/var.hpp"

namespace troupe::graph {

/// True when DEBUG is set to true, 1 or on (read once).
bool debug_enabled();
/// Overrides the DEBUG switch (tests, embedding services).
void set_debug_enabled(bool on);
/// Summary line of `t`: name, dtype, shape, mean, std, min, max, max |x| and the NaN/Inf counts.
std::string tensor_stats(const std::string& name, const Tensor& t);
/// Returns x; when debugging, prints tensor_stats of it to stderr (now in eager mode, at each run in
/// a traced graph, where it is an identity node labelled `name`), and those of its gradient as
/// "<name>.grad" when backward computes it.
Var debug_print(const std::string& name, const Var& x);

}  // namespace troupe::graph
