// Agreement with PyTorch: a GPT block and a small conv net, forward output and every parameter
// gradient against golden values made by tests/golden/make_golden.py (torch 1.13, f32).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/safetensors.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
// The entries of `file` whose name starts with `prefix`, with the prefix removed.
std::map<std::string, Tensor> with_prefix(const SafetensorsFile& file, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : file.tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace(name.substr(prefix.size()), t);
  return out;
}

// Max |a - b| / max |b|: the error relative to the tensor's scale (elementwise relative error is
// meaningless for values that are zero up to rounding).
double relative_error(const Tensor& actual, const Tensor& expected) {
  const auto a = test::values(actual), e = test::values(expected);
  EXPECT_EQ(a.size(), e.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - e[i]));
    scale = std::max(scale, std::abs(e[i]));
  }
  return diff / scale;
}

// Loads the golden file into `model`, runs forward and backward of sum(y * r), compares everything.
void expect_matches_torch(Layer& model, const std::string& file_name) {
  const SafetensorsFile golden = load_safetensors(std::string(TROUPE_TEST_DATA_DIR) + "/" + file_name);
  model.load_state_dict(with_prefix(golden, "param."));
  const Var y = model(Var(golden.tensors.at("input.x")));
  EXPECT_LE(relative_error(y.tensor(), golden.tensors.at("output.y")), 1e-5) << "forward output";
  backward(sum(y * Var(golden.tensors.at("input.r"))));
  const auto grads = with_prefix(golden, "grad.");
  ASSERT_EQ(grads.size(), model.named_parameters().size());
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_LE(relative_error(p.grad(), grads.at(name)), 1e-5) << "gradient of " << name;
  }
}
}  // namespace

TEST(Golden, GptBlockMatchesPyTorch) {
  Generator gen(0);
  GPTBlock block(32, 4, gen);
  expect_matches_torch(block, "golden_gpt_block.safetensors");
}

TEST(Golden, ConvNetMatchesPyTorch) {
  Generator gen(0);
  Sequential net;
  net.add(std::make_shared<Conv2d>(3, 8, 3, gen, 1, 1))
      .add(std::make_shared<ReLU>())
      .add(std::make_shared<Conv2d>(8, 12, 3, gen, 1, 1))
      .add(std::make_shared<PixelShuffle>(2));
  expect_matches_torch(net, "golden_conv_net.safetensors");
}
