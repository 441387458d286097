// Mixed precision (graph/amp.hpp): at O1 the autocast rewrite puts one cast per value before the
// products, which then take bf16 (or f16) operands and write f32; everything else stays f32. O2
// keeps activations low and O3 runs everything low. The forward and the gradients stay within bf16
// tolerances of f32; bad levels and dtypes are refused.
#include <gtest/gtest.h>

#include <map>

#include "graph/models.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/amp.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {

const std::vector<InputSpec> kSignature{{"x", {SymDim::symbol("batch"), 6, 16}}, {"t", {SymDim::symbol("batch"), 6, 48}}};

// A Transformer block and a head that reuses the first weight (a tied weight read by two products).
struct Model {
  Generator gen{7};
  GPTBlock block{16, 2, gen};
  Linear head{16, 16, gen};
  Var operator()(const Var& x) { return matmul(head(block(x)), block.attn->qkv->weight, false, true); }
};

std::vector<Var> loss_of(Model& m, const std::vector<Var>& in) {
  return {mse_loss(m(in[0]), in[1])};
}

// The loss of `f` on `in` and the gradients it leaves in every parameter of `m`, in order.
std::pair<double, std::vector<Tensor>> loss_and_gradients(Model& m, const TracedFunction& f,
                                                          const std::vector<Tensor>& in) {
  for (const Var& p : m.block.parameters()) p.zero_grad();
  for (const Var& p : m.head.parameters()) p.zero_grad();
  const double loss = f(in)[0].item();
  std::vector<Tensor> grads;
  for (const Var& p : m.block.parameters()) grads.push_back(p.grad().clone());
  for (const Var& p : m.head.parameters()) grads.push_back(p.grad().clone());
  return {loss, grads};
}

// Embedding, one Transformer block, the final layer norm and the vocabulary head: every op a GPT
// runs, small.
struct TinyGpt : Module {
  explicit TinyGpt(Generator& gen)
      : wte(register_module("wte", std::make_shared<Embedding>(32, 16, gen, 0.5))),
        block(register_module("block", std::make_shared<GPTBlock>(16, 2, gen))),
        ln(register_module("ln", std::make_shared<LayerNorm>(16))),
        head(register_module("head", std::make_shared<Linear>(16, 32, gen, false))) {}
  Var operator()(const Var& ids) { return (*head)((*ln)((*block)((*wte)(ids)))); }
  std::shared_ptr<Embedding> wte;
  std::shared_ptr<GPTBlock> block;
  std::shared_ptr<LayerNorm> ln;
  std::shared_ptr<Linear> head;
};

std::map<std::string, int> op_counts(const Graph& g) {
  std::map<std::string, int> n;
  for (const Node& node : g.nodes()) ++n[node.op];
  return n;
}

}  // namespace

TEST(Amp, O1CastsEachProductOperandOnceAndKeepsTheRestInF32) {
  Model m;
  const TracedFunction f32 = trace([&](const std::vector<Var>& in) { return loss_of(m, in); }, kSignature);
  const TracedFunction o1 = f32.with_amp({AmpLevel::O1, DType::bf16});
  const Graph& g = o1.graph();
  std::map<ValueId, int> casts_of;  // value -> casts reading it
  int products = 0;
  for (const Node& n : g.nodes()) {
    if (n.op == "cast") ++casts_of[n.inputs[0]];
    if (n.op != "matmul") continue;
    ++products;
    EXPECT_EQ(g.value(n.inputs[0]).info.dtype, DType::bf16) << g.dump();
    EXPECT_EQ(g.value(n.inputs[1]).info.dtype, DType::bf16);
    EXPECT_EQ(g.value(n.outputs[0]).info.dtype, DType::f32);
    for (ValueId v : n.inputs) EXPECT_EQ(g.node(g.value(v).producer).op, "cast");
  }
  EXPECT_EQ(products, op_counts(f32.graph())["matmul"]);
  for (const auto& [v, k] : casts_of) EXPECT_EQ(k, 1) << "value %" << v << " is cast " << k << " times";
  // The tied qkv weight feeds two products through one cast: fewer casts than product operands.
  EXPECT_LT(casts_of.size(), static_cast<std::size_t>(2 * products));
  // Every other op reads and writes exactly what it did in f32.
  for (const Node& n : g.nodes())
    if (n.op != "cast" && n.op != "matmul") {
      for (ValueId v : n.outputs) EXPECT_NE(g.value(v).info.dtype, DType::bf16) << n.op;
    }
  EXPECT_EQ(op_counts(g)["layer_norm"], op_counts(f32.graph())["layer_norm"]);
  EXPECT_EQ(op_counts(g)["softmax"], op_counts(f32.graph())["softmax"]);
  // O0 is the traced graph itself.
  EXPECT_EQ(f32.with_amp({AmpLevel::O0, DType::bf16}).graph().nodes().size(), f32.graph().nodes().size());
}

TEST(Amp, O1LossAndGradientsTrackF32WithinBf16Precision) {
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    if (low == DType::f16 && !kernels::native_low_precision(low)) continue;  // kernels' tests cover its error
    Model m;
    const auto fn = [&](const std::vector<Var>& in) { return loss_of(m, in); };
    const std::vector<Tensor> in{test::random_tensor({4, 6, 16}, 1), test::random_tensor({4, 6, 48}, 2)};
    const auto run = [&](const TracedFunction& f) { return loss_and_gradients(m, f, in); };
    const auto ref = run(trace(fn, kSignature).with_gradients());
    const auto amp = run(trace(fn, kSignature).with_amp({AmpLevel::O1, low}).with_gradients().optimized(3));
    EXPECT_NEAR(amp.first, ref.first, 1e-2 * std::abs(ref.first));
    EXPECT_NE(amp.first, ref.first);  // the products did run in low precision
    ASSERT_EQ(amp.second.size(), ref.second.size());
    for (std::size_t i = 0; i < ref.second.size(); ++i) {
      EXPECT_EQ(amp.second[i].dtype(), DType::f32);  // the parameters' gradients are f32
      EXPECT_LE(test::scaled_max_error(amp.second[i], ref.second[i]), 3e-2) << "gradient " << i;
    }
  }
}

TEST(Amp, LevelsAndDtypesParseAndBadOnesAreRefused) {
  EXPECT_EQ(parse_amp_level("O0"), AmpLevel::O0);
  EXPECT_EQ(parse_amp_level("O1"), AmpLevel::O1);
  EXPECT_EQ(parse_amp_level("O2"), AmpLevel::O2);
  EXPECT_EQ(parse_amp_level("O3"), AmpLevel::O3);
  EXPECT_EQ(parse_amp_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_amp_dtype("fp16"), DType::f16);
  for (const char* bad : {"o1", "O4", "o3", "", "1"}) {
    try {
      parse_amp_level(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected O0"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_amp_dtype("f32"), Error);
  EXPECT_THROW(parse_amp_dtype("int8"), Error);
  Model m;
  const TracedFunction f = trace([&](const std::vector<Var>& in) { return loss_of(m, in); }, kSignature);
  EXPECT_THROW(f.with_amp({AmpLevel::O1, DType::f32}), Error);
  EXPECT_THROW(autocast(f.graph(), DType::f64), Error);
}

// Convolutions run in bf16 at O1 too: a small super-resolution net's loss and gradients track f32,
// trained (levels 1 and 3) and at inference at level 3, whose f32-only layout and algorithm choices
// leave the bf16 convolutions alone.
TEST(Amp, O1ConvolutionsTrackF32) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  test::SrLike net(false);
  const std::vector<InputSpec> sig{{"x", {SymDim::symbol("batch"), 3, 12, 12}}, {"y", {SymDim::symbol("batch"), 3, 24, 24}}};
  const auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(net(in[0]), in[1])}; };
  const std::vector<Tensor> in{test::random_tensor({2, 3, 12, 12}, 1), test::random_tensor({2, 3, 24, 24}, 2)};
  const auto run = [&](const TracedFunction& f) {
    for (const Var& p : net.parameters()) p.zero_grad();
    const double loss = f(in)[0].item();
    std::vector<Tensor> grads;
    for (const Var& p : net.parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(loss, grads);
  };
  const auto ref = run(trace(fn, sig).with_gradients());
  for (int level : {1, 3}) {
    SCOPED_TRACE("level " + std::to_string(level));
    const TracedFunction o1 = trace(fn, sig).with_amp({AmpLevel::O1, DType::bf16}).optimized(level).with_gradients().optimized(level);
    int low_convs = 0;
    for (const Node& n : o1.graph().nodes())
      if (n.op == "conv2d" && o1.graph().value(n.inputs[0]).info.dtype == DType::bf16) ++low_convs;
    EXPECT_EQ(low_convs, 6);
    const auto amp = run(o1);
    EXPECT_NEAR(amp.first, ref.first, 2e-2 * ref.first);
    for (std::size_t i = 0; i < ref.second.size(); ++i)
      EXPECT_LE(test::scaled_max_error(amp.second[i], ref.second[i]), 5e-2) << "gradient " << i;
  }
  const auto forward = [&](const std::vector<Var>& v) { return std::vector<Var>{net(v[0])}; };
  const std::vector<InputSpec> image{{"x", {1, 3, 16, 16}}};
  const Tensor x = test::random_tensor({1, 3, 16, 16}, 3);
  const Tensor f32 = trace(forward, image).for_inference().optimized(3)({x})[0];
  const Tensor o1 = trace(forward, image).with_amp({AmpLevel::O1, DType::bf16}).for_inference().optimized(3)({x})[0];
  EXPECT_EQ(o1.dtype(), DType::f32);
  EXPECT_LE(test::scaled_max_error(o1, f32), 2e-2);
}

// O2: activations stay bf16 between ops. Products write bf16, ops that keep f32 (layernorm, softmax,
// the loss) read f32, a residual add of the f32 stream and a bf16 branch runs in f32, the graph's
// outputs keep their dtype, and the loss and gradients still track f32.
TEST(Amp, O2KeepsActivationsLowWhereThePolicySays) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  Model m;
  const auto fn = [&](const std::vector<Var>& in) { return loss_of(m, in); };
  const TracedFunction o2 = trace(fn, kSignature).with_amp({AmpLevel::O2, DType::bf16});
  const Graph& g = o2.graph();
  std::map<std::string, int> low_outputs, f32_outputs;
  for (const Node& n : g.nodes()) {
    const DType out = g.value(n.outputs[0]).info.dtype;
    (out == DType::bf16 ? low_outputs : f32_outputs)[n.op] += 1;
    if (n.op == "layer_norm" || n.op == "softmax" || n.op == "mse_loss") {
      for (ValueId v : n.inputs) EXPECT_EQ(g.value(v).info.dtype, DType::f32) << n.op;
    }
  }
  EXPECT_EQ(f32_outputs["matmul"], 0);
  EXPECT_GT(low_outputs["matmul"], 0);
  EXPECT_GT(low_outputs["gelu"] + low_outputs["bias_gelu"], 0);  // the MLP's activation runs in bf16
  EXPECT_EQ(low_outputs["layer_norm"], 0);
  EXPECT_EQ(low_outputs["softmax"], 0);
  EXPECT_EQ(g.value(g.outputs()[0]).info.dtype, DType::f32);
  // Each value is cast at most once to each dtype.
  std::map<std::pair<ValueId, std::int64_t>, int> casts;
  for (const Node& n : g.nodes())
    if (n.op == "cast") {
      EXPECT_EQ(++casts[std::make_pair(n.inputs[0], n.attrs.get_int("dtype"))], 1);
    }

  const std::vector<Tensor> in{test::random_tensor({4, 6, 16}, 1), test::random_tensor({4, 6, 48}, 2)};
  const auto run = [&](const TracedFunction& f) { return loss_and_gradients(m, f, in); };
  const auto ref = run(trace(fn, kSignature).with_gradients());
  for (int level : {1, 3}) {
    SCOPED_TRACE("level " + std::to_string(level));
    const auto amp = run(trace(fn, kSignature).with_amp({AmpLevel::O2, DType::bf16}).optimized(level).with_gradients().optimized(level));
    EXPECT_NEAR(amp.first, ref.first, 2e-2 * std::abs(ref.first));
    for (std::size_t i = 0; i < ref.second.size(); ++i) {
      EXPECT_EQ(amp.second[i].dtype(), DType::f32);
      EXPECT_LE(test::scaled_max_error(amp.second[i], ref.second[i]), 5e-2) << "gradient " << i;
    }
  }
  // O2 rewrites forward graphs only.
  EXPECT_THROW(trace(fn, kSignature).with_gradients().with_amp({AmpLevel::O2, DType::bf16}), Error);
}

// O3: pure bf16. Every op but the casts reads its floating inputs in bf16, parameters included
// (the layer norm's too); layer-norm statistics and the loss are f32; the graph's outputs keep their
// dtype; a small GPT's loss and gradients still track f32, unfused (level 1) and with the
// attention fused into one bf16 kernel (level 3).
TEST(Amp, O3RunsEveryOpInLowPrecisionAndTracksF32) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  Generator gen(11);
  TinyGpt gpt(gen);
  const std::vector<Var> params = gpt.parameters();
  const std::vector<InputSpec> sig{{"ids", {SymDim::symbol("batch"), 8}, DType::i64},
                                   {"targets", {SymDim::symbol("batch"), 8}, DType::i64}};
  const auto fn = [&](const std::vector<Var>& in) {
    return std::vector<Var>{cross_entropy(gpt(in[0]), in[1])};
  };
  const TracedFunction o3 = trace(fn, sig).with_amp({AmpLevel::O3, DType::bf16});
  const Graph& g = o3.graph();
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes()) {
    if (n.op == "cast") continue;
    ++ops[n.op];
    for (ValueId v : n.inputs)
      if (is_floating(g.value(v).info.dtype)) {
        EXPECT_EQ(g.value(v).info.dtype, DType::bf16) << n.op;
      }
    if (n.op == "layer_norm") {
      EXPECT_EQ(g.value(n.outputs[1]).info.dtype, DType::f32);  // mean
      EXPECT_EQ(g.value(n.outputs[2]).info.dtype, DType::f32);  // rstd
    }
  }
  EXPECT_GT(ops["embedding"] * ops["layer_norm"] * ops["softmax"] * ops["cross_entropy"], 0);
  EXPECT_EQ(g.value(g.outputs()[0]).info.dtype, DType::f32);

  Tensor ids = Tensor::empty({3, 8}, DType::i64), targets = Tensor::empty({3, 8}, DType::i64);
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    ids.data<std::int64_t>()[i] = (i * 7 + 3) % 32;
    targets.data<std::int64_t>()[i] = (i * 5 + 1) % 32;
  }
  const auto run = [&](const TracedFunction& f) {
    for (const Var& p : params) p.zero_grad();
    const double loss = f({ids, targets})[0].item();
    std::vector<Tensor> grads;
    for (const Var& p : params) grads.push_back(p.grad().clone());
    return std::make_pair(loss, grads);
  };
  const auto ref = run(trace(fn, sig).with_gradients());
  for (int level : {1, 3}) {
    SCOPED_TRACE("level " + std::to_string(level));
    const TracedFunction f = trace(fn, sig).with_amp({AmpLevel::O3, DType::bf16}).optimized(level);
    int low_attention = 0;
    for (const Node& n : f.graph().nodes())
      if (n.op == "causal_attention" && f.graph().value(n.inputs[0]).info.dtype == DType::bf16) ++low_attention;
    EXPECT_EQ(low_attention, level == 3 ? 1 : 0);
    const auto amp = run(f.with_gradients().optimized(level));
    EXPECT_NEAR(amp.first, ref.first, 2e-2 * ref.first);
    for (std::size_t i = 0; i < ref.second.size(); ++i) {
      EXPECT_EQ(amp.second[i].dtype(), DType::f32);
      EXPECT_LE(test::scaled_max_error(amp.second[i], ref.second[i]), 8e-2) << "gradient " << i;
    }
  }
  EXPECT_THROW(trace(fn, sig).with_gradients().with_amp({AmpLevel::O3, DType::bf16}), Error);
}
