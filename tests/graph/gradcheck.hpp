#pragma once
// Gradient checks of the graph layer: eager backward() and a traced backward against central finite
// differences in double precision.

#include <cstdint>
#include <functional>
#include <vector>

#include "troupe/graph/var.hpp"

namespace troupe::test {

/// A host f64 tensor of `shape`, uniform in [low, high), from `seed`.
Tensor random_f64(const Shape& shape, std::uint64_t seed, double low = -1.0, double high = 1.0);

/// sum(y * R) for a fixed random R of y's shape: a scalar whose gradient reaches every element of y
/// with a different weight, so a wrongly routed gradient cannot cancel out.
graph::Var weighted_sum(const graph::Var& y, std::uint64_t seed = 99);

/// Function of the checked inputs returning a one-element loss.
using LossFn = std::function<graph::Var(const std::vector<graph::Var>&)>;

/// Checks, for every floating input, that the gradient from eager backward() and the one from a
/// traced graph (TracedFunction::with_gradients) both match central differences within
/// atol + rtol * |g|, and that the traced loss equals the eager loss. Integer inputs pass through.
void expect_gradients_match(const LossFn& loss, const std::vector<Tensor>& inputs, double rtol = 1e-6,
                            double atol = 1e-7);

/// The same check for leaves that already exist (a module's parameters, in f64): `loss` reads them.
void expect_leaf_gradients_match(const std::function<graph::Var()>& loss, const std::vector<graph::Var>& leaves,
                                 double rtol = 1e-6, double atol = 1e-7);

}  // namespace troupe::test
