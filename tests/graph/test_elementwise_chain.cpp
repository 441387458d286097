// elementwise_chain, a fused chain of elementwise ops run tile by tile, and the level-3 pass that
// makes it: every step op gives the bits of its own kernel on dense inputs (NaN and Inf included),
// broadcast and strided inputs agree within rounding, in place equals out of place, malformed
// programs are refused; the pass fuses trees whose intermediates nobody else reads and leaves near
// misses alone; the chain's recomputing gradient matches finite differences, and random programs
// optimised at level 3 (forward fused before differentiation, backward after) equal level 1.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "graph/gradcheck.hpp"
#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/custom_gradient.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/elementwise_chain.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/registry.hpp"

using namespace troupe;
using namespace troupe::graph;
using kernels::ChainOp;
using kernels::ChainStep;

namespace {
// A step's op as its own node: the attributes its kernel reads.
Attrs own_attrs(const ChainStep& s) {
  if (s.op == ChainOp::relu_backward) return Attrs().set("negative_slope", s.value);
  return kernels::chain_op_has_value(s.op) ? Attrs().set("value", s.value) : Attrs();
}

// The chain computed op by op, each through its own kernel.
Tensor unfused(const std::vector<Tensor>& inputs, const std::vector<ChainStep>& steps) {
  std::vector<Tensor> values = inputs;
  for (const ChainStep& s : steps) {
    std::vector<Var> operands{Var(values[static_cast<std::size_t>(s.a)])};
    if (s.b >= 0) operands.push_back(Var(values[static_cast<std::size_t>(s.b)]));
    values.push_back(apply1(kernels::to_string(s.op), operands, own_attrs(s)).tensor());
  }
  return values.back();
}

// The chain through a graph node, as level 3 runs it.
Tensor fused(const std::vector<Tensor>& inputs, const std::vector<ChainStep>& steps) {
  std::vector<Var> in;
  for (const Tensor& t : inputs) in.push_back(Var(t));
  return apply1("elementwise_chain", in, kernels::chain_attrs(steps)).tensor();
}

// op(x[, y]) then a second step reading both the first and y, so every op is a step of a chain.
std::vector<ChainStep> two_steps(ChainOp op) {
  const int b = kernels::chain_op_arity(op) == 2 ? 1 : -1;
  const double value = op == ChainOp::relu_backward ? 0.01 : 0.75;
  return {{op, 0, b, value}, {ChainOp::mul, 2, 1, 0.0}};
}

const std::vector<ChainOp> kEveryOp = [] {
  std::vector<ChainOp> ops;
  for (int k = 0; k <= static_cast<int>(ChainOp::bias_gelu); ++k) ops.push_back(static_cast<ChainOp>(k));
  return ops;
}();
}  // namespace

TEST(ElementwiseChain, EveryStepGivesItsOwnKernelsBitsOnDenseInputs) {
  for (DType dtype : {DType::f32, DType::f64})
    for (ChainOp op : kEveryOp) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + kernels::to_string(op));
      // 7 x 300: runs longer than a tile; positive values keep log, sqrt and rsqrt finite.
      Tensor x = test::random_tensor({7, 300}, 1, 0.1, 2.0).to(dtype), y = test::random_tensor({7, 300}, 2, -2.0, 2.0).to(dtype);
      if (op == ChainOp::bias_gelu) y = test::random_tensor({300}, 2, -2.0, 2.0).to(dtype);
      EXPECT_TRUE(test::same_bits(fused({x, y}, two_steps(op)), unfused({x, y}, two_steps(op))));
      // Non-finite values go through each step as through the op's own kernel.
      const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity(), 0.0, -0.0};
      Tensor xs = x.contiguous();
      for (int k = 0; k < 5; ++k) {
        if (dtype == DType::f32) xs.data<float>()[k * 97] = static_cast<float>(specials[k]);
        else xs.data<double>()[k * 97] = specials[k];
      }
      EXPECT_TRUE(test::same_bits(fused({xs, y}, two_steps(op)), unfused({xs, y}, two_steps(op))));
    }
}

TEST(ElementwiseChain, BroadcastAndStridedInputsAgreeWithinRounding) {
  // (x - mean) * gain + bias, then gelu: a row statistic [7, 1], a bias [300], a strided x.
  const std::vector<ChainStep> steps{{ChainOp::sub, 0, 1, 0.0},
                                     {ChainOp::mul, 4, 2, 0.0},
                                     {ChainOp::add, 5, 3, 0.0},
                                     {ChainOp::gelu, 6, -1, 0.0},
                                     {ChainOp::mul_scalar, 7, -1, 0.5}};
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = test::random_tensor({300, 7}, 3).to(dtype).transpose(0, 1), m = test::random_tensor({7, 1}, 4).to(dtype),
                 g = test::random_tensor({300}, 5).to(dtype), b = test::random_tensor({}, 6).to(dtype);
    const Tensor f = fused({x, m, g, b}, steps);
    EXPECT_EQ(f.shape(), (Shape{7, 300}));
    EXPECT_LE(test::scaled_max_error(f, unfused({x, m, g, b}, steps)), dtype == DType::f32 ? 1e-6 : 1e-14) << dtype_name(dtype);
  }
}

TEST(ElementwiseChain, InPlaceEqualsOutOfPlace) {
  // The output written over input 0, which the last step also reads.
  const std::vector<ChainStep> steps{{ChainOp::tanh, 1, -1, 0.0}, {ChainOp::mul, 2, 0, 0.0}, {ChainOp::add, 3, 0, 0.0}};
  const Tensor x = test::random_tensor({5, 600}, 7), y = test::random_tensor({5, 600}, 8);
  const Tensor expected = fused({x, y}, steps);
  const Tensor in_place = x.contiguous().clone();
  std::vector<Tensor> out{in_place};
  dispatch("elementwise_chain", {in_place, y}, out, kernels::chain_attrs(steps));
  EXPECT_TRUE(test::same_bits(in_place, expected));
}

TEST(ElementwiseChain, MalformedProgramsAreRefused) {
  const Tensor x = test::random_tensor({4}, 1), y = test::random_tensor({4}, 2);
  auto message = [](const std::vector<Tensor>& in, const std::vector<ChainStep>& steps) {
    try {
      kernels::elementwise_chain(in, steps);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({x, y}, {{ChainOp::add, 0, 2, 0.0}}).find("step 0 (add) reads operands 0, 2"), std::string::npos);
  EXPECT_NE(message({x, y}, {{ChainOp::exp, 0, -1, 0.0}}).find("input 1 is read by no later step"), std::string::npos);
  EXPECT_NE(message({x}, {{ChainOp::exp, 0, -1, 0.0}, {ChainOp::exp, 0, -1, 0.0}}).find("step 0 is read by no later"),
            std::string::npos);
  EXPECT_NE(message({x}, {{ChainOp::exp, 0, 0, 0.0}}).find("it needs 1"), std::string::npos);
  EXPECT_NE(message({x}, {{static_cast<ChainOp>(99), 0, -1, 0.0}}).find("unknown op code 99"), std::string::npos);
  EXPECT_NE(message({x, x, x, x, x}, {{ChainOp::add, 0, 1, 0.0}}).find("1 to 4 inputs"), std::string::npos);
  EXPECT_NE(message({x}, {}).find("1 to 16 steps"), std::string::npos);
  EXPECT_NE(message({x, y.to(DType::f64)}, {{ChainOp::add, 0, 1, 0.0}}).find("input 1"), std::string::npos);
  EXPECT_THROW(apply1("elementwise_chain", {Var(x)}, Attrs().set("ops", std::vector<std::int64_t>{0})), Error);
  EXPECT_THROW(apply1("elementwise_chain", {Var(x)},
                      Attrs().set("ops", std::vector<std::int64_t>{4}).set("args", std::vector<std::int64_t>{0, -1})),
               Error);  // add_scalar without its value
}

TEST(ElementwiseChain, GradientsMatchFiniteDifferences) {
  // tanh(a * b + c) - exp(a) / b with b broadcast: every rule, and a value read by two steps.
  const std::vector<ChainStep> steps{{ChainOp::mul, 0, 1, 0.0}, {ChainOp::add, 3, 2, 0.0}, {ChainOp::tanh, 4, -1, 0.0},
                                     {ChainOp::exp, 0, -1, 0.0}, {ChainOp::div, 6, 1, 0.0},  {ChainOp::sub, 5, 7, 0.0},
                                     {ChainOp::mul_scalar, 8, -1, 1.5}};
  test::expect_gradients_match(
      [&](const std::vector<Var>& v) { return test::weighted_sum(apply1("elementwise_chain", v, kernels::chain_attrs(steps))); },
      {test::random_f64({3, 5}, 1), test::random_f64({5}, 2, 0.5, 2.0), test::random_f64({3, 5}, 3)});
}

TEST(ElementwiseFusion, FusesTreesAndLeavesNearMissesAlone) {
  using Body = std::function<Var(const Var&, const Var&, const Var&)>;
  auto graph_of = [](const Body& f) {
    return trace([&](const std::vector<Var>& in) { return std::vector<Var>{f(in[0], in[1], in[2])}; },
                 {{"x", {4, 6}}, {"y", {4, 6}}, {"b", {6}}});
  };
  const std::vector<Tensor> in{test::random_tensor({4, 6}, 1), test::random_tensor({4, 6}, 2), test::random_tensor({6}, 3)};
  struct Case {
    Body f;
    int chains, nodes;  // after the pass
  };
  const std::vector<Case> cases{
      {[](const Var& x, const Var& y, const Var& b) { return tanh(x * y + b) * 0.5; }, 1, 1},
      {[](const Var& x, const Var& y, const Var&) { return exp(x) + exp(y) * x; }, 1, 1},  // a tree, x read twice
      {[](const Var& x, const Var&, const Var&) { return x * x + 1.0; }, 1, 1},            // one value read twice by a step
      // Near misses: tanh's value read outside the chain (by sum); exp's of another shape (its own
      // chain); a custom-gradient region; a non-elementwise node between; a single node.
      {[](const Var& x, const Var& y, const Var&) { const Var t = tanh(x); return (t * y) * sum(t); }, 1, 3},
      {[](const Var& x, const Var& y, const Var& b) { return x * exp(b * 2.0) + y; }, 2, 2},
      {[](const Var& x, const Var& y, const Var&) { return custom_relu(x * y) + y; }, 0, 3},
      {[](const Var& x, const Var& y, const Var&) { return tanh(softmax(x + y)); }, 0, 3},
      {[](const Var& x, const Var& y, const Var&) { return x + y; }, 0, 1},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const TracedFunction fn = graph_of(cases[i].f);
    const Graph after = fuse_elementwise_chains(fn.graph());
    check_graph(after);
    EXPECT_EQ(test::count_ops(after, "elementwise_chain"), cases[i].chains) << after.dump();
    EXPECT_EQ(static_cast<int>(after.nodes().size()), cases[i].nodes) << after.dump();
    test::expect_same_results(fn.graph(), after, in);
  }
  // Six inputs: the tree splits into chains that each take at most four, ((a + b) * c - d) and
  // its value / e * f.
  const TracedFunction wide = trace(
      [](const std::vector<Var>& v) { return std::vector<Var>{(((v[0] + v[1]) * v[2] - v[3]) / v[4]) * v[5]}; },
      {{"a", {8}}, {"b", {8}}, {"c", {8}}, {"d", {8}}, {"e", {8}}, {"f", {8}}});
  const Graph split = fuse_elementwise_chains(wide.graph());
  EXPECT_EQ(test::count_ops(split, "elementwise_chain"), 2);
  EXPECT_EQ(split.nodes().size(), 2u) << split.dump();
  std::vector<Tensor> six;
  for (int k = 0; k < 6; ++k) six.push_back(test::random_tensor({8}, 10 + k, 0.5, 2.0));
  test::expect_same_results(wide.graph(), split, six);
}

namespace {
// A random elementwise program over x [batch, 6], a bias and a weight: trees, shared values,
// scalar ops, activations and a matmul between them; loss = mean of the last value squared.
class RandomElementwise {
 public:
  explicit RandomElementwise(std::uint32_t seed) : rng_(seed), ops_(6 + rng_() % 10) {
    for (auto& o : ops_) o = {static_cast<int>(rng_() % 9), static_cast<int>(rng_()), static_cast<int>(rng_())};
  }
  Var operator()(const Var& x) const {
    std::vector<Var> pool{x, x * b};
    for (const auto& o : ops_) {
      const Var &p = pool[static_cast<std::size_t>(o[1]) % pool.size()], &q = pool[static_cast<std::size_t>(o[2]) % pool.size()];
      switch (o[0]) {
        case 0: pool.push_back(p + q); break;
        case 1: pool.push_back(p * q); break;
        case 2: pool.push_back(p - q * 0.5); break;
        case 3: pool.push_back(tanh(p)); break;
        case 4: pool.push_back(gelu(p) + b); break;
        case 5: pool.push_back(relu(p) * 2.0 + 0.25); break;
        case 6: pool.push_back(exp(p * -0.5)); break;
        case 7: pool.push_back(matmul(p, w)); break;
        default: pool.push_back(silu(p) / (q * q + 1.0)); break;
      }
    }
    return mean(pool.back() * pool.back());
  }
  Var b = Var::leaf(test::random_tensor({6}, 2), "b");
  Var w = Var::leaf(test::random_tensor({6, 6}, 3), "w");

 private:
  mutable std::mt19937 rng_;
  std::vector<std::array<int, 3>> ops_;
};
}  // namespace

TEST(ElementwiseFusion, RandomProgramsTrainedAtLevelThreeEqualLevelOne) {
  int chains = 0;
  for (std::uint32_t seed = 0; seed < 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomElementwise program(seed);
    auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{program(in[0])}; };
    const std::vector<InputSpec> sig{{"x", {SymDim::symbol("batch"), 6}}};
    const TracedFunction plain = trace(loss, sig).with_gradients();
    // The backward alone fused: the same bits.
    const Graph backward_fused = fuse_elementwise_chains(plain.graph());
    const std::vector<Tensor> params = test::parameter_tensors(plain);
    const std::vector<Tensor> x{test::random_tensor({3, 6}, seed)};
    test::expect_same_results(plain.graph(), backward_fused, x, params);
    // The training path: forward chains fused before the gradients (which recompute them).
    const TracedFunction level3 = trace(loss, sig).optimized(3).with_gradients().optimized(3);
    chains += test::count_ops(level3.graph(), "elementwise_chain");
    const auto a = execute(plain.graph(), x, params), b = execute(level3.graph(), x, params);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LE(test::scaled_max_error(b[i], a[i]), 1e-6) << "output " << i;
    if (HasFailure()) return;
  }
  EXPECT_GT(chains, 60);
}
