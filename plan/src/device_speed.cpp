// This device's speeds for the cost model, measured (troupe/plan/cost_model.hpp).
#include <algorithm>
#include <chrono>

#include "troupe/graph/ops.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/rng.hpp"
#include "troupe/plan/cost_model.hpp"

namespace troupe::plan {

// This machine's GFLOP/s at a 256 x 256 f32 product, the size of the steps' products: the best of
// five rounds of 20, after a warm-up (the first calls build oneDNN's kernels).
double measure_gflops() {
  Generator gen(1);
  Tensor a = Tensor::empty({256, 256}), b = Tensor::empty({256, 256});
  gen.uniform_(a, -1, 1);
  gen.uniform_(b, -1, 1);
  graph::NoGradGuard no_grad;
  constexpr int reps = 20;
  for (int i = 0; i < reps; ++i) (void)graph::matmul(a, b).tensor();
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) (void)graph::matmul(a, b).tensor();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * 256 * 256 * 256 * reps / s / 1e9);
  }
  return best;
}

// This machine's bandwidth at AdamW's update, in GB/s of the 28 bytes an element it streams: the
// best of five updates of 4M elements (larger than the caches, as a model's parameters are).
double measure_update_gbps() {
  constexpr std::int64_t n = 1 << 22;
  Generator gen(2);
  Tensor p = Tensor::empty({n}), g = Tensor::empty({n}), m = Tensor::zeros({n}), v = Tensor::zeros({n});
  gen.uniform_(p, -1, 1);
  gen.uniform_(g, -1, 1);
  double best = 0;
  for (int round = 0; round < 6; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::adamw_update_(p, g, m, v, kernels::AdamWParams{}, round + 1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (round > 0) best = std::max(best, 28.0 * n / s / 1e9);
  }
  return best;
}

}  // namespace troupe::plan
