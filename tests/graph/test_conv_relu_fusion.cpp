// Conv-relu fusion (level 3): relu(conv2d(...)) becomes conv2d with a relu epilogue, giving the
// same bits forward and backward (f32 through oneDNN's post-op, f64 through im2col); near misses
// stay; custom_relu fuses only in an inference function, whose custom gradient is gone.
#include <gtest/gtest.h>

#include "graph/gradcheck.hpp"
#include "graph/models.hpp"
#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/custom_gradient.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/conv.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
const SymDim kBatch = SymDim::symbol("batch");

int fused_convs(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == "conv2d" && node.attrs.has("relu") && node.attrs.get_int("relu") == 1;
  return n;
}
}  // namespace

TEST(ConvRelu, TheEpilogueEqualsConvThenReluBitForBit) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = test::random_tensor({2, 5, 9, 7}, 1).to(dtype), w = test::random_tensor({6, 5, 3, 3}, 2).to(dtype),
                 b = test::random_tensor({6}, 3).to(dtype);
    kernels::Conv2dParams p{2, 1, 1, 0};
    const Tensor plain = kernels::relu(kernels::conv2d(x, w, b, p));
    p.relu = true;
    EXPECT_TRUE(test::same_bits(kernels::conv2d(x, w, b, p), plain)) << dtype_name(dtype);
    EXPECT_TRUE(test::same_bits(kernels::conv2d(x, w, Tensor(), p), kernels::relu(kernels::conv2d(x, w, Tensor(), {2, 1, 1, 0}))))
        << dtype_name(dtype) << " without bias";
  }
}

TEST(ConvReluFusion, FusesConvAndReluAndLeavesNearMissesAlone) {
  test::SrLike net(false);
  const Tensor x = test::random_tensor({2, 3, 10, 10}, 4);
  auto forward = [&](const std::vector<Var>& in) { return std::vector<Var>{net(in[0])}; };
  const TracedFunction fn = trace(forward, {{"x", {kBatch, 3, 10, 10}}});
  const Graph fused = fuse_conv_relu(fn.graph());
  check_graph(fused);
  // head and each block's first conv feed a relu; the second convs feed the residual adds.
  EXPECT_EQ(fused_convs(fused), 3);
  EXPECT_EQ(test::count_ops(fused, "relu"), 0);
  test::expect_same_results(fn.graph(), fused, {x}, test::parameter_tensors(fn));

  // A conv whose output has another reader, and a relu of something else, stay as they are.
  const Tensor w = test::random_tensor({4, 3, 3, 3}, 5);
  auto near_miss = [&](const std::vector<Var>& in) {
    const Var y = conv2d(in[0], Var(w), 1, 1);
    return std::vector<Var>{relu(y) + y, relu(in[0])};
  };
  const Graph untouched = fuse_conv_relu(trace(near_miss, {{"x", {1, 3, 6, 6}}}).graph());
  EXPECT_EQ(fused_convs(untouched), 0);
  EXPECT_EQ(test::count_ops(untouched, "relu"), 2);
}

TEST(ConvReluFusion, CustomReluFusesOnlyForInference) {
  test::SrLike net(true);
  auto forward = [&](const std::vector<Var>& in) { return std::vector<Var>{net(in[0])}; };
  const TracedFunction fn = trace(forward, {{"x", {kBatch, 3, 8, 8}}});
  EXPECT_EQ(fused_convs(fn.optimized(3).graph()), 0) << "a custom gradient region must survive for training";
  const TracedFunction inference = fn.for_inference().optimized(3);
  EXPECT_EQ(fused_convs(inference.graph()), 3);
  const Tensor x = test::random_tensor({1, 3, 8, 8}, 6);
  // Inference also picks Winograd for the 3x3 convolutions: equal to rounding.
  EXPECT_LE(test::scaled_max_error(inference({x})[0], fn({x})[0]), 1e-5);
  EXPECT_THROW(fn.for_inference().with_gradients(), Error);
}

TEST(ConvReluFusion, TrainingAtLevelThreeGivesTheLevelOneGradientsExactly) {
  test::SrLike net(false);
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(net(in[0]), in[1])}; };
  const std::vector<InputSpec> sig{{"x", {kBatch, 3, 8, 8}}, {"y", {kBatch, 3, 16, 16}}};
  const TracedFunction plain = trace(loss, sig).with_gradients();
  const TracedFunction fused = trace(loss, sig).optimized(3).with_gradients().optimized(3);
  EXPECT_EQ(fused_convs(fused.graph()), 3);
  const std::vector<Tensor> inputs{test::random_tensor({2, 3, 8, 8}, 7), test::random_tensor({2, 3, 16, 16}, 8)};
  const std::vector<Tensor> a = execute(plain.graph(), inputs, test::parameter_tensors(plain));
  const std::vector<Tensor> b = execute(fused.graph(), inputs, test::parameter_tensors(fused));
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(test::same_bits(a[k], b[k])) << "output " << k;
}

TEST(ConvReluFusion, GradientOfTheFusedConvMatchesFiniteDifferences) {
  const Tensor w = test::random_f64({3, 2, 3, 3}, 9), b = test::random_f64({3}, 10);
  test::expect_gradients_match(
      [](const std::vector<Var>& v) {
        return test::weighted_sum(apply1("conv2d", {v[0], v[1], v[2]},
                                         Attrs().set("stride", std::int64_t{1}).set("padding", std::int64_t{1}).set("relu", std::int64_t{1})));
      },
      {test::random_f64({1, 2, 5, 5}, 11), w, b});
}
