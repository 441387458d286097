#pragma once
// Dropout (Srivastava et al.): while training, each element is zeroed with probability p and the
// rest scaled by 1 / (1 - p); at evaluation and in inference graphs it is the identity. Which
// elements drop is drawn by counter (kernels/dropout.hpp) from the run's position, which the actor
// runtime gives each step and micro-batch, and eager code sets with RandomScope.

#include <cstdint>
#include <string>

#include "troupe/graph/var.hpp"
#include "troupe/kernels/dropout.hpp"

namespace troupe::graph {

/// The number a dropout site's decisions are keyed by: a hash of its name, the same in every process.
std::uint64_t dropout_site(const std::string& name);

/// x with dropout of probability p at the site `name` (x itself when p is 0): x * dropout_mask(x).
/// The caller decides whether it trains (Module::training()).
Var dropout(const Var& x, double p, const std::string& name);

/// The position eager ops on this thread draw random numbers at (zeros unless a RandomScope is alive).
const kernels::RandomPosition& eager_random_position();

/// While alive, eager ops (and graphs run by the executor) on this thread draw at `at`: an eager
/// training step sets its step and rows here, as the actor runtime does per micro-batch.
class RandomScope {
 public:
  explicit RandomScope(const kernels::RandomPosition& at);
  ~RandomScope();
  RandomScope(const RandomScope&) = delete;
  RandomScope& operator=(const RandomScope&) = delete;

 private:
  kernels::RandomPosition previous_;
};

}  // namespace troupe::graph
