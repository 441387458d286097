// The level-2 pipeline on seeded random programs: DAGs of elementwise, scalar, matmul, reduction,
// reshape and permute ops over an input with a dynamic batch, three parameters and constants, with
// repeated subexpressions and the identities the passes look for. The optimised graph (outputs and
// parameter gradients) must give the same bits as the traced one.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
const SymDim kBatch = SymDim::symbol("batch");

// One step of a random program: an op kind applied to pool entries a and b with choice c.
struct Step {
  int kind, a, b, c;
};

// A random program over values of shape [batch, 6] (or [1, 6], from constants); the same seed
// gives the same program.
class RandomProgram {
 public:
  explicit RandomProgram(std::uint32_t seed) {
    std::mt19937 rng(seed);
    const int length = 8 + static_cast<int>(rng() % 12);
    for (int k = 0; k < length; ++k) {
      const int pool = 2 + k;  // x and a constant expression come first
      if (k > 2 && rng() % 5 == 0) {
        steps_.push_back(steps_[rng() % steps_.size()]);  // a repeated subexpression
      } else {
        steps_.push_back(Step{static_cast<int>(rng() % 10), static_cast<int>(rng() % pool),
                              static_cast<int>(rng() % pool), static_cast<int>(rng() % 3)});
      }
    }
    constant_ = test::random_tensor({1, 6}, seed);
  }

  // Appends one value per step to `pool` and returns the loss and one intermediate value.
  std::vector<Var> operator()(const std::vector<Var>& in) const {
    std::vector<Var> pool{in[0], exp(Var(constant_)) * 0.5 + Var(constant_)};  // folds to a constant
    for (const Step& s : steps_) pool.push_back(apply(s, pool));
    Var total = pool.back();
    for (std::size_t k = 2; k < pool.size(); k += 3) total = total + pool[k];
    return {mean(total * total), pool[pool.size() / 2]};
  }

  Var w1 = Var::leaf(test::random_tensor({6, 6}, 1), "w1");
  Var b = Var::leaf(test::random_tensor({6}, 2), "b");
  Var w2 = Var::leaf(test::random_tensor({6, 6}, 3), "w2");

 private:
  Var apply(const Step& s, const std::vector<Var>& pool) const {
    const Var &x = pool[static_cast<std::size_t>(s.a)], &y = pool[static_cast<std::size_t>(s.b)];
    const SymDim n = x.size(0);
    switch (s.kind) {
      case 0: return s.c == 0 ? x + y : s.c == 1 ? x - y : x * y;
      case 1: return s.c == 0 ? x * 1.0 : s.c == 1 ? x * 0.5 : x * -2.0;
      case 2: return s.c == 0 ? x + 0.0 : s.c == 1 ? x - 0.0 : x + 0.25;
      case 3: return s.c == 0 ? tanh(x) : s.c == 1 ? relu(x) : gelu(x);
      case 4: return s.c == 0 ? matmul(x, w1) : s.c == 1 ? matmul(x, w2, false, true) : matmul(x, w1) + b;
      case 5: return s.c == 0 ? x - mean(x, {1}, true) : s.c == 1 ? sum(x, {1}, true) * y : x * b;
      case 6: return s.c == 0 ? reshape(reshape(x, {n * SymDim(6)}), {n, 6}) : reshape(reshape(x, {n, 2, 3}), {n, 6});
      case 7: {
        const Var t = reshape(x, {n, 2, 3});
        const Var p = s.c == 0 ? t.permute({0, 2, 1}).permute({0, 2, 1}) : t.permute({2, 0, 1}).permute({1, 2, 0});
        return reshape(s.c == 2 ? p.permute({0, 2, 1}) * 1.0 : p, {n, 6});
      }
      case 8: {
        const Var ones = Var(Tensor::full({6}, 1.0)), zeros = Var(Tensor::full({6}, s.c == 0 ? -0.0 : 0.0));
        return s.c == 2 ? ones * relu(x) : relu(x) * ones + zeros;
      }
      default: return s.c == 0 ? x * Var(constant_) : y * x;
    }
  }

  std::vector<Step> steps_;
  Tensor constant_;
};
}  // namespace

TEST(PassRandomGraphs, OptimisedGraphsGiveTheSameBits) {
  std::size_t before = 0, after = 0;
  std::map<std::string, std::size_t> removed;
  for (std::uint32_t seed = 0; seed < 120; ++seed) {
    RandomProgram program(seed);
    auto fn = trace([&](const std::vector<Var>& in) { return program(in); }, {{"x", {kBatch, 6}}}).with_gradients();
    std::vector<PassStat> stats;
    const Graph optimized = optimize(fn.graph(), 2, {true, ""}, &stats);
    for (const PassStat& p : stats) removed[p.pass] += p.nodes_before - p.nodes_after;
    before += fn.graph().nodes().size();
    after += optimized.nodes().size();
    std::vector<Tensor> params;
    for (const Var& p : fn.parameters()) params.push_back(p.tensor());
    for (std::int64_t batch : {1, 5}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", batch " + std::to_string(batch));
      test::expect_same_results(fn.graph(), optimized, {test::random_tensor({batch, 6}, seed)}, params);
    }
    if (HasFailure()) return;
  }
  std::cout << "random graphs: " << before << " nodes -> " << after << "; removed by";
  for (const auto& [pass, n] : removed) std::cout << ' ' << pass << ' ' << n;
  std::cout << '\n';
  EXPECT_LT(after, before);
}
