// Tracing: dynamic dims, signature checks, build-time shape errors, dumps, JIT_LEVEL, debug prints,
// and eager == traced.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "graph/gradcheck.hpp"
#include "expect_error.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/debug.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
const SymDim kBatch = SymDim::symbol("batch");

// A two-layer perceptron over parameters w1 [4, 8], b1 [8], w2 [8, 3].
struct Mlp {
  Var w1 = Var::leaf(test::random_tensor({4, 8}, 1), "w1");
  Var b1 = Var::leaf(test::random_tensor({8}, 2), "b1");
  Var w2 = Var::leaf(test::random_tensor({8, 3}, 3), "w2");
  Var operator()(const Var& x) const { return matmul(gelu(matmul(x, w1) + b1), w2); }
};

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const auto x = test::values(a), y = test::values(b);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / (std::abs(y[i]) + 1e-6));
  return worst;
}
}  // namespace

TEST(Trace, OneGraphServesEveryBatchSize) {
  Mlp mlp;
  auto fn = trace([&](const std::vector<Var>& in) { return std::vector<Var>{mlp(in[0])}; }, {{"x", {kBatch, 4}}});
  EXPECT_EQ(sym_shape_str(fn.graph().value(fn.graph().outputs()[0]).info.shape), "[batch, 3]");
  for (std::int64_t b : {1, 2, 7}) {
    const Tensor x = test::random_tensor({b, 4}, 10 + static_cast<std::uint64_t>(b));
    const Tensor traced = fn({x})[0];
    NoGradGuard no_grad;
    const Tensor eager = mlp(Var(x)).tensor();
    EXPECT_EQ(traced.shape(), (Shape{b, 3}));
    EXPECT_LE(max_rel_diff(traced, eager), 1e-6);
  }
}

TEST(Trace, MinusOneIsADynamicDimOfItsOwn) {
  auto fn = trace([](const std::vector<Var>& in) { return std::vector<Var>{sum(in[0], {1}) + in[1]}; },
                  {{"x", {-1, 3}}, {"y", {1}}});
  EXPECT_EQ(sym_shape_str(fn.signature()[0].shape), "[x.0, 3]");
  const Tensor out = fn({test::random_tensor({5, 3}, 4), Tensor::full({1}, 1.0)})[0];
  EXPECT_EQ(out.shape(), Shape{5});
}

TEST(Trace, InputsThatDoNotFitTheSignatureAreNamed) {
  Mlp mlp;
  auto fn = trace([&](const std::vector<Var>& in) { return std::vector<Var>{mlp(in[0])}; }, {{"x", {2, 4}}});
  test::expect_error_mentions([&] { fn({test::random_tensor({3, 4}, 5)}); },
                        {"input 'x'", "f32[2, 4]", "[3, 4]", "dynamic"});
  test::expect_error_mentions([&] { fn({test::random_tensor({2, 4, 1}, 5)}); }, {"input 'x'", "rank 2"});
  test::expect_error_mentions([&] { fn({test::random_tensor({2, 4}, 5).to(DType::f64)}); }, {"input 'x'", "f64"});
  test::expect_error_mentions([&] { fn({}); }, {"takes 1 inputs"});
  auto two = trace([](const std::vector<Var>& in) { return std::vector<Var>{in[0] + in[1]}; },
                   {{"a", {kBatch, 2}}, {"b", {kBatch, 2}}});
  test::expect_error_mentions([&] { two({test::random_tensor({3, 2}, 1), test::random_tensor({4, 2}, 2)}); },
                        {"input 'b'", "symbol 'batch' is already 3"});
}

TEST(Trace, ShapeErrorsAreRaisedWhenTheNodeIsBuilt) {
  Var w = Var::leaf(test::random_tensor({5, 2}, 6), "w");
  test::expect_error_mentions(
      [&] { trace([&](const std::vector<Var>& in) { return std::vector<Var>{matmul(in[0], w)}; }, {{"x", {kBatch, 4}}}); },
      {"matmul", "f32[batch, 4]", "f32[5, 2]"});
  test::expect_error_mentions(
      [&] {
        trace([](const std::vector<Var>& in) { return std::vector<Var>{in[0] + in[1]}; },
              {{"a", {kBatch, 3}}, {"b", {4}}});
      },
      {"add", "[batch, 3]", "[4]"});
  test::expect_error_mentions([] { trace([](const std::vector<Var>& in) { return in; }, {{"x", {-2}}}); }, {"-2"});
  test::expect_error_mentions([] { trace([](const std::vector<Var>& in) { return in; }, {{"x", {1}}, {"x", {1}}}); },
                        {"twice"});
}

TEST(Trace, DumpIsOneLinePerNodeWithShapes) {
  Var w = Var::leaf(Tensor::zeros({4, 2}), "w");
  auto fn = trace([&](const std::vector<Var>& in) { return std::vector<Var>{relu(matmul(in[0], w))}; },
                  {{"x", {kBatch, 4}}});
  EXPECT_EQ(fn.graph().dump(),
            "%0 = input \"x\" : f32[batch, 4]\n"
            "%1 = param \"w\" : f32[4, 2]\n"
            "%2 = matmul(%0, %1) {trans_a=0, trans_b=0} : f32[batch, 2]\n"
            "%3 = relu(%2) : f32[batch, 2]\n"
            "outputs: %3\n");
}

TEST(Trace, TracedGradientsEqualEager) {
  Mlp mlp;
  const Tensor x = test::random_tensor({6, 4}, 7);
  const Tensor t = Tensor::from_vector<std::int64_t>({0, 2, 1, 1, 0, 2}, {6});
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{cross_entropy(mlp(in[0]), in[1])}; };
  backward(loss({Var(x), Var(t)})[0]);
  std::vector<Tensor> eager{mlp.w1.grad(), mlp.b1.grad(), mlp.w2.grad()};
  for (Var* p : {&mlp.w1, &mlp.b1, &mlp.w2}) p->zero_grad();
  auto step = trace(loss, {{"x", {kBatch, 4}}, {"targets", {kBatch}, DType::i64}}).with_gradients();
  step({x, t});
  std::vector<Tensor> traced{mlp.w1.grad(), mlp.b1.grad(), mlp.w2.grad()};
  for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_LE(max_rel_diff(traced[i], eager[i]), 1e-6) << i;
  // Only the parameters asked for get gradients.
  for (Var* p : {&mlp.w1, &mlp.b1, &mlp.w2}) p->zero_grad();
  trace(loss, {{"x", {kBatch, 4}}, {"targets", {kBatch}, DType::i64}}).with_gradients({mlp.w2})({x, t});
  EXPECT_TRUE(mlp.w2.grad().defined());
  EXPECT_FALSE(mlp.w1.grad().defined());
}

TEST(Trace, JitLevelChoosesEagerOrTraced) {
  ::unsetenv("JIT_LEVEL");
  EXPECT_EQ(jit_level(), 3);
  ::setenv("JIT_LEVEL", "0", 1);
  EXPECT_EQ(jit_level(), 0);
  ::setenv("JIT_LEVEL", "fast", 1);
  test::expect_error_mentions([] { jit_level(); }, {"JIT_LEVEL='fast'", "0 (eager)"});
  ::unsetenv("JIT_LEVEL");

  Mlp mlp;
  const Tensor x = test::random_tensor({3, 4}, 8);
  auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{sum(mlp(in[0]))}; };
  Jit eager(fn, {{"x", {kBatch, 4}}}, true, 0), traced(fn, {{"x", {kBatch, 4}}}, true, 1);
  EXPECT_FALSE(eager.traced());
  EXPECT_TRUE(traced.traced());
  const Tensor le = eager({x})[0];
  const Tensor ge = mlp.w1.grad();
  mlp.w1.zero_grad();
  const Tensor lt = traced({x})[0];
  EXPECT_LE(max_rel_diff(lt, le), 1e-6);
  EXPECT_LE(max_rel_diff(mlp.w1.grad(), ge), 1e-6);
  // The eager path checks the signature too, so switching levels changes no error.
  test::expect_error_mentions([&] { eager({test::random_tensor({3, 5}, 9)}); }, {"input 'x'", "[3, 5]"});
  EXPECT_THROW(eager.traced_function(), Error);
}

TEST(Trace, DebugPrintShowsStatisticsOnlyWhenEnabled) {
  const Tensor x = Tensor::from_vector<float>({1.0f, 3.0f, NAN, INFINITY}, {4});
  set_debug_enabled(false);
  testing::internal::CaptureStderr();
  debug_print("h", Var(x));
  auto off = trace([](const std::vector<Var>& in) { return std::vector<Var>{debug_print("h", in[0])}; }, {{"x", {4}}});
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(off.graph().nodes().size(), 0u);

  set_debug_enabled(true);
  testing::internal::CaptureStderr();
  debug_print("h", Var(x));
  auto on = trace([](const std::vector<Var>& in) { return std::vector<Var>{debug_print("h", in[0])}; }, {{"x", {4}}});
  on({x});
  const std::string printed = testing::internal::GetCapturedStderr();
  set_debug_enabled(false);
  const std::string line = "[debug] h: f32[4] mean=2 std=1 min=1 max=3 max|x|=3 nan=1 inf=1\n";
  EXPECT_EQ(printed, line + line);
  EXPECT_NE(on.graph().dump().find("debug_print(%0) {label=\"h\"}"), std::string::npos);
}

TEST(Trace, DebugPrintShowsTheGradientWhereBackwardComputesIt) {
  // loss = sum(3 h) with h = debug_print(w): h's gradient is 3 everywhere, printed as "h.grad".
  const Tensor w0 = Tensor::from_vector<float>({1, 2}, {2});
  const std::string value = "[debug] h: f32[2] mean=1.5 std=0.5 min=1 max=2 max|x|=2 nan=0 inf=0\n";
  const std::string grad = "[debug] h.grad: f32[2] mean=3 std=0 min=3 max=3 max|x|=3 nan=0 inf=0\n";
  auto loss = [](const Var& w) { return sum(debug_print("h", w) * 3.0); };
  set_debug_enabled(true);
  Var w = Var::leaf(w0.clone(), "w");
  testing::internal::CaptureStderr();
  backward(loss(w));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), value + grad);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{3, 3}));
  // Traced: the backward's print is a node of its own, labelled "h.grad".
  w.zero_grad();
  auto step = trace([&](const std::vector<Var>&) { return std::vector<Var>{loss(w)}; }, {}).with_gradients();
  testing::internal::CaptureStderr();
  step({});
  EXPECT_EQ(testing::internal::GetCapturedStderr(), value + grad);
  set_debug_enabled(false);
  EXPECT_NE(step.graph().dump().find("{label=\"h.grad\", backward}"), std::string::npos);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{3, 3}));
}
