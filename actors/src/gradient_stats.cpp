// Gradient norm and variance from one pass of sums (troupe/actors/gradient_stats.hpp).
#include "troupe/actors/gradient_stats.hpp"

#include <algorithm>
#include <cmath>

#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/reduce.hpp"

namespace troupe::actors {

GradientSums gradient_sums(const std::map<std::string, Tensor>& gradients,
                           const std::function<double(const std::string& name)>& weight) {
  GradientSums s;
  for (const auto& [name, g] : gradients) {
    const double w = weight ? weight(name) : 1.0;
    s.squares += w * kernels::squared_norm(g);
    s.sum += w * kernels::sum(g, {}).item();
    s.count += w * static_cast<double>(g.numel());
  }
  return s;
}

std::pair<double, double> gradient_stats(const GradientSums& s) {
  if (s.count == 0) return {0.0, 0.0};
  const double mean = s.sum / s.count;
  return {std::sqrt(s.squares), std::max(0.0, s.squares / s.count - mean * mean)};
}

std::pair<double, double> gradient_stats(const std::map<std::string, Tensor>& gradients) {
  return gradient_stats(gradient_sums(gradients));
}

}  // namespace troupe::actors
