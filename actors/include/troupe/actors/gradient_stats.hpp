#pragma once
// The gradient figures a training reports each step: the global norm and the variance of all
// gradient elements taken together, from sums that the ranks of a tensor-parallel group can add.

#include <functional>
#include <map>
#include <string>
#include <utility>

#include "troupe/kernels/tensor.hpp"

namespace troupe::actors {

/// Sums over a set of gradients: of their squares, of their elements, and the elements' count.
struct GradientSums {
  double squares = 0, sum = 0, count = 0;
};
/// The sums of `gradients`, each weighted by `weight(name)` (default 1: a tensor-parallel rank
/// counts a gradient that every rank of its group holds whole 1/n, so the group's sums add up to
/// the whole model's); one pass each, double accumulation.
GradientSums gradient_sums(const std::map<std::string, Tensor>& gradients,
                           const std::function<double(const std::string& name)>& weight = {});
/// Global norm and element variance of the gradients the sums came from.
std::pair<double, double> gradient_stats(const GradientSums& sums);
/// The same of a set of gradients.
std::pair<double, double> gradient_stats(const std::map<std::string, Tensor>& gradients);

}  // namespace troupe::actors
