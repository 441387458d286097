// Modules: dotted parameter names, state dicts and files, deterministic init, f64 gradient checks of
// every layer (eager and traced), attention causality, and one trace serving several sequence lengths.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "graph/gradcheck.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(name);
  return out;
}

// Gradient check of `layer` applied to an f64 leaf input of `shape`, all parameters included.
void check_layer(Layer& layer, const Shape& shape, std::uint64_t seed) {
  layer.to(DType::f64);
  Var x = Var::leaf(test::random_f64(shape, seed), "x");
  std::vector<Var> leaves = layer.parameters();
  leaves.push_back(x);
  test::expect_leaf_gradients_match([&] { return test::weighted_sum(layer(x)); }, leaves);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()) + ".safetensors")).string();
}
}  // namespace

TEST(Modules, ParametersHaveStableDottedNames) {
  Generator gen(1);
  GPTBlock block(8, 2, gen);
  EXPECT_EQ(names_of(block), (std::vector<std::string>{
                                 "ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                                 "attn.proj.bias", "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
                                 "mlp.proj.weight", "mlp.proj.bias"}));
  EXPECT_EQ(block.attn->qkv->weight.tensor().shape(), (Shape{24, 8}));
  EXPECT_EQ(block.parameter_count(), 2 * 16 + (24 * 8 + 24) + (8 * 8 + 8) + (32 * 8 + 32) + (8 * 32 + 8));
  Sequential net;
  net.add(std::make_shared<Conv2d>(3, 4, 3, gen, 1, 1)).add(std::make_shared<ReLU>()).add(std::make_shared<Linear>(2, 2, gen, false));
  EXPECT_EQ(names_of(net), (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
}

// Layers added to a child after the child was registered still get their full dotted names.
TEST(Modules, LayersAddedToARegisteredChildAreNamedInFull) {
  struct Net : Module {
    std::shared_ptr<Sequential> blocks = register_module("blocks", std::make_shared<Sequential>());
  };
  Generator gen(2);
  Net net;
  net.blocks->add(std::make_shared<Linear>(2, 2, gen, false));
  auto inner = std::make_shared<Sequential>();
  inner->add(std::make_shared<Linear>(2, 2, gen, false));
  net.blocks->add(inner);
  inner->add(std::make_shared<Linear>(2, 2, gen, false));
  EXPECT_EQ(names_of(net), (std::vector<std::string>{"blocks.0.weight", "blocks.1.0.weight", "blocks.1.1.weight"}));
}

TEST(Modules, InitialisationIsDeterministicAndScaled) {
  Generator g1(5), g2(5), g3(6);
  Linear a(64, 16, g1), b(64, 16, g2), c(64, 16, g3);
  EXPECT_EQ(test::values(a.weight.tensor()), test::values(b.weight.tensor()));
  EXPECT_NE(test::values(a.weight.tensor()), test::values(c.weight.tensor()));
  for (double v : test::values(a.weight.tensor())) EXPECT_LE(std::abs(v), 1.0 / 8.0);
  LayerNorm ln(4);
  EXPECT_EQ(test::values(ln.weight.tensor()), (std::vector<double>(4, 1.0)));
  EXPECT_THROW(CausalSelfAttention(10, 3, g1), Error);
  EXPECT_THROW(Linear(0, 3, g1), Error);
}

TEST(Modules, GradientsOfEveryLayer) {
  Generator gen(7);
  Linear linear(3, 4, gen);
  check_layer(linear, {2, 3}, 1);
  Linear no_bias(3, 2, gen, false);
  check_layer(no_bias, {2, 5, 3}, 2);
  LayerNorm ln(5);
  check_layer(ln, {3, 5}, 3);
  Conv2d conv(2, 3, 3, gen, 1, 1);
  check_layer(conv, {1, 2, 4, 4}, 4);
  MLP mlp(4, 6, gen);
  check_layer(mlp, {2, 4}, 5);
  CausalSelfAttention attn(4, 2, gen);
  check_layer(attn, {2, 3, 4}, 6);
  GPTBlock block(4, 2, gen);
  check_layer(block, {1, 3, 4}, 7);
  Sequential net;
  net.add(std::make_shared<Conv2d>(1, 4, 3, gen, 1, 1)).add(std::make_shared<ReLU>()).add(std::make_shared<PixelShuffle>(2));
  check_layer(net, {1, 1, 3, 3}, 8);
}

TEST(Modules, EmbeddingGradients) {
  Generator gen(8);
  Embedding emb(5, 3, gen);
  emb.to(DType::f64);
  const Var ids(Tensor::from_vector<std::int64_t>({4, 0, 4, 2}, {2, 2}));
  test::expect_leaf_gradients_match([&] { return test::weighted_sum(emb(ids)); }, emb.parameters());
  EXPECT_THROW(emb(Var(Tensor::from_vector<std::int64_t>({5}, {1}))), Error);  // id out of range
}

TEST(Modules, AttentionIsCausal) {
  Generator gen(9);
  CausalSelfAttention attn(8, 2, gen);
  Tensor x = test::random_tensor({1, 4, 8}, 10);
  NoGradGuard no_grad;
  const auto before = test::values(attn(Var(x)).tensor());
  Tensor changed = x.clone();
  for (int c = 0; c < 8; ++c) changed.data<float>()[3 * 8 + c] += 5.0f;  // the last position only
  const auto after = test::values(attn(Var(changed)).tensor());
  for (std::size_t i = 0; i < 3 * 8; ++i) EXPECT_FLOAT_EQ(after[i], before[i]) << i;
  bool last_changed = false;
  for (std::size_t i = 3 * 8; i < 4 * 8; ++i) last_changed = last_changed || after[i] != before[i];
  EXPECT_TRUE(last_changed);
}

TEST(Modules, OneTraceServesEverySequenceLength) {
  Generator gen(11);
  GPTBlock block(8, 2, gen);
  auto fn = trace([&](const std::vector<Var>& in) { return std::vector<Var>{block(in[0])}; },
                  {{"x", {SymDim::symbol("batch"), SymDim::symbol("time"), 8}}});
  for (std::int64_t t : {1, 3, 6}) {
    const Tensor x = test::random_tensor({2, t, 8}, 12 + static_cast<std::uint64_t>(t));
    const auto traced = test::values(fn({x})[0]);
    NoGradGuard no_grad;
    const auto eager = test::values(block(Var(x)).tensor());
    ASSERT_EQ(traced.size(), eager.size());
    for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_NEAR(traced[i], eager[i], 1e-6 * (1 + std::abs(eager[i])));
  }
}

TEST(Modules, StateDictsAndFilesRoundTrip) {
  Generator g1(13), g2(14);
  GPTBlock a(8, 2, g1), b(8, 2, g2);
  const std::string path = temp_path("troupe_block");
  a.save(path);
  b.load(path);
  std::filesystem::remove(path);
  for (const auto& [name, t] : a.state_dict()) EXPECT_EQ(test::values(b.state_dict().at(name)), test::values(t)) << name;
}

TEST(Modules, BadStateDictsAreRefusedAndChangeNothing) {
  Generator gen(15);
  Linear lin(3, 2, gen);
  const auto original = test::values(lin.weight.tensor());
  auto expect_refused = [&](const std::map<std::string, Tensor>& state, const std::string& mention) {
    try {
      lin.load_state_dict(state);
      FAIL() << "expected refusal: " << mention;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
    EXPECT_EQ(test::values(lin.weight.tensor()), original);
  };
  expect_refused({{"weight", Tensor::zeros({2, 3})}}, "missing parameters: bias");
  expect_refused({{"weight", Tensor::zeros({2, 3})}, {"bias", Tensor::zeros({2})}, {"extra", Tensor::zeros({1})}},
                 "unexpected entries: extra");
  expect_refused({{"weight", Tensor::zeros({3, 2})}, {"bias", Tensor::zeros({2})}}, "'weight'");
  lin.load_state_dict({{"weight", Tensor::zeros({2, 3})}, {"bias", Tensor::zeros({2})}, {"extra", Tensor::zeros({1})}},
                      false);
  EXPECT_EQ(test::values(lin.weight.tensor()), std::vector<double>(6, 0.0));
}
