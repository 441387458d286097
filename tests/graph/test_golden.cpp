// Agreement with PyTorch: a GPT block and a small conv net, forward output and every parameter
// gradient, and AdamW's steps, against golden values made by tests/golden/make_golden.py (torch
// 1.13, f32).
#include <gtest/gtest.h>

#include <cmath>

#include "graph/models.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/optim.hpp"

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

// Loads the golden file into `model`, runs forward and backward of sum(y * r), compares everything.
void expect_matches_torch(Layer& model, const std::string& file_name) {
  const SafetensorsFile golden = load_safetensors(std::string(TROUPE_TEST_DATA_DIR) + "/" + file_name);
  model.load_state_dict(with_prefix(golden, "param."));
  const Var y = model(Var(golden.tensors.at("input.x")));
  EXPECT_LE(test::scaled_max_error(y.tensor(), golden.tensors.at("output.y")), 1e-5) << "forward output";
  backward(sum(y * Var(golden.tensors.at("input.r"))));
  const auto grads = with_prefix(golden, "grad.");
  ASSERT_EQ(grads.size(), model.named_parameters().size());
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_LE(test::scaled_max_error(p.grad(), grads.at(name)), 1e-5) << "gradient of " << name;
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
  expect_matches_torch(*test::small_conv_net(gen), "golden_conv_net.safetensors");
}

// AdamW's moments and parameter after each of 4 steps, as torch.optim.AdamW leaves them: its
// coefficients 1 - beta are formed in double and rounded once (1 - 0.999 in f32 arithmetic would
// make the second moment 1.3e-5 too small).
TEST(Golden, AdamWStepsMatchPyTorch) {
  const SafetensorsFile golden = load_safetensors(std::string(TROUPE_TEST_DATA_DIR) + "/golden_adamw.safetensors");
  Tensor p = golden.tensors.at("param.0").clone();
  Tensor m = Tensor::zeros(p.shape()), v = Tensor::zeros(p.shape());
  kernels::AdamWParams hp;
  hp.lr = 3e-3;
  hp.weight_decay = 0.1;
  for (std::int64_t step = 1; step <= 4; ++step) {
    const std::string k = std::to_string(step);
    kernels::adamw_update_(p, golden.tensors.at("grad." + k), m, v, hp, step);
    EXPECT_LE(test::scaled_max_error(m, golden.tensors.at("exp_avg." + k)), 1e-6) << "first moment, step " << step;
    EXPECT_LE(test::scaled_max_error(v, golden.tensors.at("exp_avg_sq." + k)), 1e-6) << "second moment, step " << step;
    EXPECT_LE(test::scaled_max_error(p, golden.tensors.at("param." + k)), 1e-6) << "parameter, step " << step;
  }
}
