// Norm-cast fusion (level 3): a layer norm whose f32 output only a cast to bf16 reads writes it as
// bf16 itself, with the cast's bits; near misses are left alone; an O2 GPT block trained through
// level 3 gives the same loss and gradients bit for bit with the pass as without it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/amp.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/cpu_features.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {

using Fn = std::function<std::vector<Var>(const Var& x, const Var& r, const Var& g, const Var& b)>;

Graph graph_of(const Fn& f) {
  return trace([&](const std::vector<Var>& in) { return f(in[0], in[1], in[2], in[3]); },
               {{"x", {5, 3, 16}}, {"r", {5, 3, 16}}, {"g", {16}}, {"b", {16}}})
      .graph();
}

const std::vector<Tensor> kInputs{test::random_tensor({5, 3, 16}, 1, -3, 3), test::random_tensor({5, 3, 16}, 2),
                                  test::random_tensor({16}, 3, 0.5, 1.5), test::random_tensor({16}, 4)};

}  // namespace

TEST(NormCastFusion, TheNormWritesYLowWithTheCastsBits) {
  const std::vector<Fn> fused{
      [](const Var& x, const Var&, const Var& g, const Var& b) {
        return std::vector<Var>{cast(layer_norm(x, g, b), DType::bf16)};
      },
      [](const Var& x, const Var& r, const Var& g, const Var& b) {
        const AddLayerNorm s = add_layer_norm(x, r, g, b);
        return std::vector<Var>{s.sum, cast(s.y, DType::f16)};
      },
  };
  for (std::size_t i = 0; i < fused.size(); ++i) {
    const Graph g = graph_of(fused[i]);
    const Graph after = fuse_norm_casts(g);
    EXPECT_EQ(test::count_ops(after, "cast"), 0) << after.dump();
    ASSERT_EQ(after.nodes().size(), 1u);
    EXPECT_TRUE(after.nodes()[0].attrs.has("y_dtype"));
    test::expect_same_results(g, after, kInputs);
  }
  const std::vector<Fn> near_misses{
      [](const Var& x, const Var&, const Var& g, const Var& b) {  // y read by another op too
        const Var y = layer_norm(x, g, b);
        return std::vector<Var>{cast(y, DType::bf16), y};
      },
      [](const Var& x, const Var&, const Var& g, const Var& b) {  // cast to f64, not a low dtype
        return std::vector<Var>{cast(layer_norm(x, g, b), DType::f64)};
      },
      [](const Var& x, const Var&, const Var& g, const Var& b) {  // bf16 rows (O3): y is bf16 already
        return std::vector<Var>{cast(layer_norm(cast(x, DType::bf16), cast(g, DType::bf16), cast(b, DType::bf16)), DType::f16)};
      },
      [](const Var& x, const Var& r, const Var& g, const Var& b) {  // the sum cast, not y
        return std::vector<Var>{cast(add_layer_norm(x, r, g, b).sum, DType::bf16)};
      },
  };
  for (std::size_t i = 0; i < near_misses.size(); ++i) {
    const Graph g = graph_of(near_misses[i]);
    EXPECT_EQ(fuse_norm_casts(g).dump(), g.dump()) << "near miss " << i;
  }
}

TEST(NormCastFusion, AnO2GptBlockTrainsWithTheSameBitsWithAndWithoutIt) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  Generator gen(5);
  GPTBlock block(16, 2, gen);
  const auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(block(in[0]), in[1])}; };
  const std::vector<InputSpec> sig{{"x", {SymDim::symbol("batch"), 6, 16}}, {"t", {SymDim::symbol("batch"), 6, 16}}};
  const auto step = [&] {
    return trace(loss, sig).with_amp({AmpLevel::O2, DType::bf16}).optimized(3).with_gradients().optimized(3);
  };
  ::setenv("TROUPE_DISABLE_PASSES", "norm-cast-fusion", 1);
  const TracedFunction without = step();
  ::unsetenv("TROUPE_DISABLE_PASSES");
  const TracedFunction with = step();
  int lowered = 0;
  for (const Node& n : with.graph().nodes()) lowered += n.attrs.has("y_dtype");
  EXPECT_EQ(lowered, 2) << "ln1 and ln2 feed products";
  EXPECT_EQ(test::count_ops(without.graph(), "cast") - test::count_ops(with.graph(), "cast"), 2);
  test::expect_same_results(without.graph(), with.graph(), {test::random_tensor({3, 6, 16}, 7), test::random_tensor({3, 6, 16}, 8)},
                            test::parameter_tensors(with));
}
