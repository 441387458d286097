// Layout and algorithm choice (level 3, inference): activations between convolutions and
// elementwise ops stay channel-blocked, graph outputs and other readers keep NCHW, the results
// equal the NCHW graph's (the same bits with the direct convolution; within 1e-5 of the output's
// scale with Winograd), and a blocked or Winograd conv refuses to be differentiated.
#include <gtest/gtest.h>

#include <iostream>

#include "graph/gradcheck.hpp"
#include "graph/models.hpp"
#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/conv.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/registry.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
const SymDim kBatch = SymDim::symbol("batch");

// Named convolutions, so a trace can tell their parameters apart.
struct Convs : Module {
  Generator gen{3};
  std::vector<std::shared_ptr<Conv2d>> c;
  explicit Convs(const std::vector<std::pair<std::int64_t, std::int64_t>>& channels) {
    for (const auto& [in, out] : channels)
      c.push_back(register_module("c" + std::to_string(c.size()), std::make_shared<Conv2d>(in, out, 3, gen, 1, 1)));
  }
};

int blocked_outputs(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes()) n += g.value(node.outputs[0]).info.shape.size() == 5;
  return n;
}
}  // namespace

TEST(ChannelBlocks, ShapesRoundTripAndBadShapesAreRefused) {
  EXPECT_EQ(kernels::channel_blocked_shape({2, 32, 5, 7}), (Shape{2, 2, 5, 7, 16}));
  EXPECT_EQ(kernels::channel_unblocked_shape({2, 2, 5, 7, 16}), (Shape{2, 32, 5, 7}));
  EXPECT_THROW(kernels::channel_blocked_shape({2, 12, 5, 7}), Error);
  EXPECT_THROW(kernels::channel_unblocked_shape({2, 12, 5, 7}), Error);
}

TEST(ChannelBlocks, BlockedConvolutionsEqualNchwOnes) {
  const Tensor x = test::random_tensor({2, 16, 6, 5}, 1), w = test::random_tensor({32, 16, 3, 3}, 2),
               b = test::random_tensor({32}, 3);
  const kernels::Conv2dParams nchw{1, 1, 1, 1};
  const Tensor expected = kernels::conv2d(x, w, b, nchw);
  // x in blocks, by hand: [N, C/16, 16, H, W] -> [N, C/16, H, W, 16].
  const Tensor xb = x.reshape({2, 1, 16, 6, 5}).permute({0, 1, 3, 4, 2}).contiguous();
  kernels::Conv2dParams p = nchw;
  p.blocked_input = true;
  EXPECT_TRUE(test::same_bits(kernels::conv2d(xb, w, b, p), expected));
  p.blocked_output = true;
  const Tensor yb = kernels::conv2d(xb, w, b, p);
  ASSERT_EQ(yb.shape(), (Shape{2, 2, 6, 5, 16}));
  EXPECT_TRUE(test::same_bits(yb.permute({0, 1, 4, 2, 3}).reshape({2, 32, 6, 5}).contiguous(), expected));
  EXPECT_THROW(kernels::conv2d(xb.to(DType::f64), w.to(DType::f64), b.to(DType::f64), p), Error);
}

TEST(ChannelBlocks, BlockedBf16ConvolutionsEqualNchwOnes) {
  const Tensor x = test::random_tensor({2, 16, 6, 5}, 1).to(DType::bf16), w = test::random_tensor({32, 16, 3, 3}, 2).to(DType::bf16);
  for (DType out : {DType::bf16, DType::f32}) {
    const Tensor b = test::random_tensor({32}, 3).to(out);
    const kernels::Conv2dParams nchw{1, 1, 1, 1};
    const Tensor expected = kernels::conv2d(x, w, b, nchw, out);
    const Tensor xb = x.reshape({2, 1, 16, 6, 5}).permute({0, 1, 3, 4, 2}).contiguous();
    kernels::Conv2dParams p = nchw;
    p.blocked_input = p.blocked_output = true;
    const Tensor yb = kernels::conv2d(xb, w, b, p, out);
    ASSERT_EQ(yb.shape(), (Shape{2, 2, 6, 5, 16}));
    ASSERT_EQ(yb.dtype(), out);
    EXPECT_TRUE(test::same_bits(yb.permute({0, 1, 4, 2, 3}).reshape({2, 32, 6, 5}).contiguous(), expected));
  }
}

TEST(LayoutChoice, BlocksTheConvBodyOfAnInferenceGraph) {
  for (bool custom : {false, true}) {
    test::SrLike net(custom);
    auto forward = [&](const std::vector<Var>& in) { return std::vector<Var>{net(in[0])}; };
    const TracedFunction fn = trace(forward, {{"x", {kBatch, 3, 8, 8}}});
    const TracedFunction chosen = fn.for_inference().optimized(3);
    // SrLike has 8 channels, fewer than a block: nothing may change.
    EXPECT_EQ(blocked_outputs(chosen.graph()), 0);
    const Tensor x = test::random_tensor({2, 3, 8, 8}, 4);
    EXPECT_LE(test::scaled_max_error(chosen({x})[0], fn({x})[0]), 1e-5);
  }
  // 16 channels: head conv (+relu), a residual block, the tail; the outputs of every conv but the
  // tail's and the residual add are blocked; pixel_shuffle reads the NCHW tail output.
  Convs m({{3, 16}, {16, 16}, {16, 16}, {16, 12}});
  auto forward = [&](const std::vector<Var>& in) {
    const Var h = relu((*m.c[0])(in[0]));
    const Var r = h + (*m.c[2])(relu((*m.c[1])(h)));
    return std::vector<Var>{pixel_shuffle((*m.c[3])(r), 2)};
  };
  const TracedFunction fn = trace(forward, {{"x", {kBatch, 3, -1, -1}}});
  const TracedFunction chosen = fn.for_inference().optimized(3);
  // (the residual add is then folded into the second body conv: 3 nodes make blocked values)
  EXPECT_EQ(blocked_outputs(chosen.graph()), 3) << chosen.graph().dump();
  for (const Tensor& x : {test::random_tensor({1, 3, 9, 7}, 5), test::random_tensor({2, 3, 4, 6}, 6)}) {
    const Tensor plain = fn({x})[0];
    for (int call = 0; call < 3; ++call) EXPECT_LE(test::scaled_max_error(chosen({x})[0], plain), 1e-5) << "call " << call;
  }
  // Layouts alone (no Winograd, no fusion: the relus are blocked too) give the NCHW graph's bits.
  const Graph blocked_only = choose_layouts(fn.for_inference().optimized(2).graph());
  EXPECT_EQ(blocked_outputs(blocked_only), 6);
  for (const Tensor& x : {test::random_tensor({1, 3, 9, 7}, 5)}) {
    test::expect_same_results(fn.graph(), blocked_only, {x}, test::parameter_tensors(fn));
  }
}

TEST(LayoutChoice, BlocksBf16ActivationsAtO2) {
  Convs m({{3, 16}, {16, 16}, {16, 16}, {16, 12}});
  auto forward = [&](const std::vector<Var>& in) {
    const Var h = relu((*m.c[0])(in[0]));
    const Var r = h + (*m.c[2])(relu((*m.c[1])(h)));
    return std::vector<Var>{pixel_shuffle((*m.c[3])(r), 2)};
  };
  const TracedFunction fn = trace(forward, {{"x", {kBatch, 3, -1, -1}}}).with_amp({AmpLevel::O2, DType::bf16});
  const Graph plain = fn.for_inference().optimized(2).graph();
  const Graph blocked = choose_layouts(plain);
  int bf16_blocks = 0;
  for (const Node& n : blocked.nodes()) {
    const ValueInfo& info = blocked.value(n.outputs[0]).info;
    bf16_blocks += info.shape.size() == 5 && info.dtype == DType::bf16;
  }
  EXPECT_GE(bf16_blocks, 3) << blocked.dump();
  const Tensor x = test::random_tensor({1, 3, 9, 7}, 5);
  test::expect_same_results(plain, blocked, {x}, test::parameter_tensors(fn));
  // Level 3 folds the skip add into the blocked bf16 convolution (a sum post-op: one rounding
  // where the unfused pair rounds twice).
  const TracedFunction level3 = fn.for_inference().optimized(3);
  EXPECT_EQ(test::count_ops(level3.graph(), "conv2d_residual"), 1);
  EXPECT_LE(test::scaled_max_error(level3({x})[0].to(DType::f32), fn.for_inference()({x})[0].to(DType::f32)), 1e-2);
}

TEST(ConvAlgorithmChoice, WinogradIsWithinRoundingOfTheDirectConvolution) {
  const Tensor x = test::random_tensor({1, 64, 20, 18}, 8), w = test::random_tensor({64, 64, 3, 3}, 9, -0.05, 0.05),
               b = test::random_tensor({64}, 10);
  for (std::int64_t stride : {1, 2}) {
    kernels::Conv2dParams p{stride, stride, 1, 1};
    const Tensor direct = kernels::conv2d(x, w, b, p);
    p.winograd = true;
    const Tensor winograd = kernels::conv2d(x, w, b, p);
    const double error = test::scaled_max_error(winograd, direct);
    std::cout << "winograd vs direct, stride " << stride << ": scaled error " << error << '\n';
    EXPECT_LE(error, 1e-5) << "stride " << stride;
    if (stride == 2) {
      EXPECT_TRUE(test::same_bits(winograd, direct)) << "no Winograd for stride 2: the direct kernel";
    }
  }
  // The pass marks 3x3 stride-1 f32 convolutions only.
  Convs m({{16, 16}});
  auto forward = [&](const std::vector<Var>& in) {
    return std::vector<Var>{(*m.c[0])(in[0]), conv2d(in[0], Var(test::random_tensor({4, 16, 1, 1}, 11)), 1, 0)};
  };
  const Graph g = choose_conv_algorithms(trace(forward, {{"x", {1, 16, 6, 6}}}).graph());
  int marked = 0;
  for (const Node& n : g.nodes()) marked += n.attrs.has("winograd");
  EXPECT_EQ(marked, 1);
}

TEST(LayoutChoice, OutputsAndOtherReadersKeepNchw) {
  Convs m({{16, 16}, {16, 16}});
  auto forward = [&](const std::vector<Var>& in) {
    const Var y = (*m.c[0])(in[0]);  // read by the second conv and by the graph output: NCHW
    const Var z = (*m.c[1])(y);      // read by sum: NCHW
    return std::vector<Var>{y, sum(z)};
  };
  const Graph g = choose_layouts(trace(forward, {{"x", {1, 16, 5, 5}}}).graph());
  check_graph(g);
  EXPECT_EQ(blocked_outputs(g), 0);
  // Training graphs never get here (pipeline(3) without inference), and a blocked conv refuses a gradient.
  std::vector<std::string> names;
  for (const Pass& p : pipeline(3)) names.push_back(p.name);
  EXPECT_EQ(std::count(names.begin(), names.end(), "layout-choice"), 0);
  Var w = Var::leaf(test::random_tensor({16, 16, 3, 3}, 7));
  auto blocked_conv = [&](const std::vector<Var>& in) {
    return std::vector<Var>{sum(apply1("conv2d", {in[0], w},
                                       Attrs().set("stride", std::int64_t{1}).set("padding", std::int64_t{1})
                                           .set("blocked_input", std::int64_t{0}).set("blocked_output", std::int64_t{1})))};
  };
  EXPECT_THROW(trace(blocked_conv, {{"x", {1, 16, 4, 4}}}).with_gradients(), Error);
}

TEST(ConvResidualFusion, FoldsTheSkipAddIntoTheConvolutionInItsBuffer) {
  // head conv, then h + conv(relu(conv(h))): the add's residual h dies at the add.
  Convs m({{3, 16}, {16, 16}, {16, 16}});
  auto forward = [&](const std::vector<Var>& in) {
    const Var h = (*m.c[0])(in[0]);
    return std::vector<Var>{sum(h + (*m.c[2])(relu((*m.c[1])(h))))};
  };
  const TracedFunction fn = trace(forward, {{"x", {1, 3, 9, 7}}});
  // Without Winograd (level 2, then the layout and residual passes), so the bits can be compared.
  const Graph blocked = choose_layouts(fn.for_inference().optimized(2).graph());
  const Graph fused = fuse_conv_residual(blocked);
  check_graph(fused);
  EXPECT_EQ(test::count_ops(fused, "conv2d_residual"), 1);
  EXPECT_EQ(test::count_ops(fused, "add"), 0);
  const Tensor x = test::random_tensor({1, 3, 9, 7}, 12);
  test::expect_same_results(blocked, fused, {x}, test::parameter_tensors(fn));
  // With buffer reuse the fused conv writes into the residual's buffer: one allocation fewer.
  cpu_allocator().reset_stats();
  execute(blocked, {x}, test::parameter_tensors(fn), {}, true);
  const std::uint64_t before = cpu_allocator().stats().requests;
  cpu_allocator().reset_stats();
  const Tensor reused = execute(fused, {x}, test::parameter_tensors(fn), {}, true)[0];
  EXPECT_LT(cpu_allocator().stats().requests, before);
  EXPECT_TRUE(test::same_bits(reused, execute(blocked, {x}, test::parameter_tensors(fn))[0]));
}

TEST(ConvResidualFusion, AResidualThatIsAlsoTheConvInputIsNotOverwritten) {
  Convs m({{16, 16}});
  auto forward = [&](const std::vector<Var>& in) {
    const Var h = relu(in[0]);
    return std::vector<Var>{sum(h + (*m.c[0])(h))};  // the residual is the conv's own input
  };
  const TracedFunction fn = trace(forward, {{"x", {1, 16, 6, 5}}});
  const Graph fused = fuse_conv_residual(fn.graph());
  EXPECT_EQ(test::count_ops(fused, "conv2d_residual"), 1);
  const Tensor x = test::random_tensor({1, 16, 6, 5}, 13);
  const Tensor a = execute(fn.graph(), {x}, test::parameter_tensors(fn))[0];
  EXPECT_TRUE(test::same_bits(execute(fused, {x}, test::parameter_tensors(fn), {}, true)[0], a));
  // The f64 kernel (im2col) adds the same way, the residual overwritten in place or copied first.
  const Tensor r = test::random_f64({1, 16, 6, 5}, 14), xd = test::random_f64({1, 16, 6, 5}, 15),
               w = test::random_f64({16, 16, 3, 3}, 16), b = test::random_f64({16}, 17);
  const Tensor expected = kernels::add(kernels::conv2d(xd, w, b, {1, 1, 1, 1}), r);
  const Attrs attrs = Attrs().set("stride", std::int64_t{1}).set("padding", std::int64_t{1});
  std::vector<Tensor> copied{Tensor::empty(r.shape(), DType::f64)}, in_place{r.clone()};
  dispatch("conv2d_residual", {r, xd, w, b}, copied, attrs);
  dispatch("conv2d_residual", {in_place[0], xd, w, b}, in_place, attrs);
  EXPECT_LE(test::scaled_max_error(copied[0], expected), 1e-12);
  EXPECT_TRUE(test::same_bits(in_place[0], copied[0]));
  // No gradient: training graphs keep the add (the pass runs for inference graphs only).
  std::vector<std::string> names;
  for (const Pass& p : pipeline(3)) names.push_back(p.name);
  EXPECT_EQ(std::count(names.begin(), names.end(), "conv-residual-fusion"), 0);
}
