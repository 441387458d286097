// Product-cast fusion (level 3): a bf16 product read only by a cast up to f32 is written as f32
// from its accumulator; a matmul_bias's bias cast from f32 goes with it. The fused product gives
// exactly the f32-written kernel's result, which the pair rounds to bf16; near misses are left
// alone; a GPT block trained at O2 through level 3 has no such pair left and tracks f32.
#include <gtest/gtest.h>

#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/amp.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/matmul.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {

const std::vector<InputSpec> kLinear{{"x", {5, 3, 40}, DType::bf16}, {"w", {24, 40}, DType::bf16}, {"b", {24}}};

using Fn = std::function<std::vector<Var>(const Var& x, const Var& w, const Var& b)>;

Graph graph_of(const Fn& f) {
  return trace([&](const std::vector<Var>& in) { return f(in[0], in[1], in[2]); }, kLinear).graph();
}

// Pairs the pass would fold: casts up to f32 whose input is a low product read by nothing else.
int foldable_pairs(const Graph& g) {
  std::vector<int> readers(g.values().size(), 0);
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) ++readers[static_cast<std::size_t>(v)];
  for (ValueId v : g.outputs()) ++readers[static_cast<std::size_t>(v)];
  int pairs = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != "cast" || g.value(n.outputs[0]).info.dtype != DType::f32) continue;
    const Value& in = g.value(n.inputs[0]);
    if (in.kind != ValueKind::op_output) continue;
    const Node& p = g.node(in.producer);
    pairs += (p.op == "matmul" || p.op == "matmul_bias") && is_low_precision(in.info.dtype) &&
             readers[static_cast<std::size_t>(n.inputs[0])] == 1;
  }
  return pairs;
}

// A Transformer block, a layer norm and a head without bias: the products of a GPT's training step.
struct BlockAndHead : Module {
  explicit BlockAndHead(Generator& gen)
      : block(register_module("block", std::make_shared<GPTBlock>(16, 2, gen))),
        ln(register_module("ln", std::make_shared<LayerNorm>(16))),
        head(register_module("head", std::make_shared<Linear>(16, 8, gen, false))) {}
  Var operator()(const Var& x) { return (*head)((*ln)((*block)(x))); }
  std::shared_ptr<GPTBlock> block;
  std::shared_ptr<LayerNorm> ln;
  std::shared_ptr<Linear> head;
};

}  // namespace

TEST(ProductCastFusion, WritesTheProductAsF32AndDropsTheBiasCast) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  const Tensor x = test::random_tensor({5, 3, 40}, 1).to(DType::bf16), w = test::random_tensor({24, 40}, 2).to(DType::bf16),
               b = test::random_tensor({24}, 3);
  const Graph plain = graph_of([](const Var& x, const Var& w, const Var&) {
    return std::vector<Var>{cast(matmul(x, w, false, true), DType::f32)};
  });
  const Graph folded = fuse_product_casts(plain);
  ASSERT_EQ(folded.nodes().size(), 1u) << folded.dump();
  EXPECT_EQ(folded.nodes()[0].attrs.get_int("out_dtype"), static_cast<std::int64_t>(DType::f32));
  const Tensor want = kernels::matmul(x, w, false, true, DType::f32);
  const Tensor got = execute(folded, {x, w, b}, {})[0], pair = execute(plain, {x, w, b}, {})[0];
  EXPECT_TRUE(test::same_bits(got, want));
  EXPECT_TRUE(test::same_bits(pair, want.to(DType::bf16).to(DType::f32))) << "the pair rounds the same sums to bf16";
  EXPECT_FALSE(test::same_bits(got, pair));

  const Graph biased = graph_of([](const Var& x, const Var& w, const Var& b) {
    return std::vector<Var>{cast(matmul_bias(x, w, cast(b, DType::bf16), false, true), DType::f32)};
  });
  const Graph fused = fuse_product_casts(biased);
  EXPECT_EQ(test::count_ops(fused, "cast"), 0) << fused.dump();
  ASSERT_EQ(test::count_ops(fused, "matmul_bias"), 1);
  EXPECT_TRUE(test::same_bits(execute(fused, {x, w, b}, {})[0], kernels::matmul_bias(x, w, b, false, true, DType::f32)));
}

TEST(ProductCastFusion, LeavesNearMissesAlone) {
  const std::vector<Fn> near_misses{
      [](const Var& x, const Var& w, const Var&) {  // the product has another reader
        const Var y = matmul(x, w, false, true);
        return std::vector<Var>{cast(y, DType::f32), y};
      },
      [](const Var& x, const Var& w, const Var&) {  // written f32 already, then cast down
        return std::vector<Var>{cast(matmul(x, w, false, true, DType::f32), DType::bf16)};
      },
      [](const Var& x, const Var& w, const Var& b) {  // an f32 product
        return std::vector<Var>{cast(matmul(cast(x, DType::f32), cast(w, DType::f32), false, true) + b, DType::f64)};
      },
      [](const Var& x, const Var& w, const Var& b) {  // a bias cast that something else reads too
        const Var low = cast(b, DType::bf16);
        return std::vector<Var>{cast(matmul_bias(x, w, low, false, true), DType::f32), low};
      },
      [](const Var& x, const Var& w, const Var& b) {  // a bias made low by another op than a cast from f32
        return std::vector<Var>{cast(matmul_bias(x, w, cast(b, DType::bf16) * 2.0, false, true), DType::f32)};
      },
  };
  for (std::size_t i = 0; i < near_misses.size(); ++i) {
    const Graph g = graph_of(near_misses[i]);
    EXPECT_EQ(fuse_product_casts(g).dump(), g.dump()) << "near miss " << i;
  }
}

TEST(ProductCastFusion, AnO2GptBlockAtLevelThreeHasNoPairLeftAndTracksF32) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  Generator gen(3);
  BlockAndHead model(gen);
  const auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(model(in[0]), in[1])}; };
  const std::vector<InputSpec> sig{{"x", {SymDim::symbol("batch"), 6, 16}}, {"t", {SymDim::symbol("batch"), 6, 8}}};
  const TracedFunction o2 = trace(loss, sig).with_amp({AmpLevel::O2, DType::bf16});
  const TracedFunction fused = o2.optimized(3).with_gradients().optimized(3);
  EXPECT_GT(foldable_pairs(o2.with_gradients().graph()), 6) << "the projections, the logits and the weight gradients";
  EXPECT_EQ(foldable_pairs(fused.graph()), 0) << fused.graph().dump();
  const TracedFunction f32 = trace(loss, sig).with_gradients();
  const std::vector<Tensor> in{test::random_tensor({4, 6, 16}, 5), test::random_tensor({4, 6, 8}, 6)};
  const std::vector<Var> params = model.parameters();
  const auto run = [&](const TracedFunction& f) {
    for (const Var& p : params) p.zero_grad();
    std::vector<Tensor> out{f(in)[0]};
    for (const Var& p : params) out.push_back(p.grad().clone());
    return out;
  };
  const std::vector<Tensor> want = run(f32), got = run(fused);
  EXPECT_LE(test::scaled_max_error(got[0], want[0]), 2e-2);
  for (std::size_t i = 1; i < want.size(); ++i) {
    EXPECT_EQ(got[i].dtype(), DType::f32);
    EXPECT_LE(test::scaled_max_error(got[i], want[i]), 5e-2) << "gradient " << i;
  }
}
