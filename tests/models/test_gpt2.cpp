// GPT-2-family checkpoints in the Hugging Face layout (models/gpt2.hpp): a tiny GPT-2 written by
// tests/golden/make_gpt2_model.py (Conv1D weights, tied head, mask buffers) loads, and its logits
// equal PyTorch's forward pass of the same weights; the incremental decoder agrees; a broken config
// or a foreign tensor is a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernels/reference.hpp"
#include "troupe/graph/safetensors.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/gpt2.hpp"
#include "troupe/models/gpt_decoder.hpp"

using namespace troupe;

namespace {

const std::string kDir = std::string(TROUPE_TEST_DATA_DIR) + "/gpt2_tiny";

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Gpt2, LogitsEqualPyTorchsOnTheSameWeights) {
  const auto model = models::load_gpt2(kDir);
  EXPECT_EQ(model->config.vocab, 657);
  EXPECT_EQ(model->config.seq, 16);
  EXPECT_EQ(model->config.d_ff, 128);
  const graph::SafetensorsFile expected = graph::load_safetensors(kDir + "/expected.safetensors");
  const Tensor ids = expected.tensors.at("ids");
  graph::NoGradGuard no_grad;
  const Tensor logits = model->logits(graph::Var(ids)).tensor();
  EXPECT_LE(test::scaled_max_error(logits, expected.tensors.at("logits")), 1e-5);
  // The decoder, a prompt and then one token at a time, gives the same last logits.
  models::GptDecoder decoder(*model, graph::AmpOptions{}, true);
  std::vector<std::int64_t> context;
  const std::int64_t* row = ids.data<std::int64_t>();
  for (int k = 0; k < 12; ++k) context.push_back(row[k]);
  const std::vector<float> next = decoder.next(context);
  const Tensor last = expected.tensors.at("logits").slice(0, 0, 1).slice(1, 11, 12).reshape({657}).contiguous();
  double worst = 0, scale = 0;
  for (int v = 0; v < 657; ++v) {
    worst = std::max(worst, std::abs(static_cast<double>(next[static_cast<std::size_t>(v)]) - last.data<float>()[v]));
    scale = std::max(scale, std::abs(static_cast<double>(last.data<float>()[v])));
  }
  EXPECT_LE(worst / scale, 1e-5);
}

TEST(Gpt2, BrokenCheckpointsAreClearErrors) {
  double eps = 0;
  EXPECT_NE(message_of([] { models::load_gpt2("/nonexistent-gpt2"); }).find("config.json"), std::string::npos);
  EXPECT_NE(message_of([&] { models::gpt2_config("{", "c.json", eps); }).find("c.json is not JSON"), std::string::npos);
  EXPECT_NE(message_of([&] { models::gpt2_config(R"({"vocab_size": 10})", "c.json", eps); }).find("\"n_embd\""),
            std::string::npos);
  const std::string ok = R"({"vocab_size": 10, "n_embd": 8, "n_head": 2, "n_layer": 1, "n_positions": 4)";
  EXPECT_NE(message_of([&] { models::gpt2_config(ok + R"(, "activation_function": "relu"})", "c.json", eps); })
                .find("tanh GELU"),
            std::string::npos);
  EXPECT_NE(message_of([&] { models::gpt2_config(R"({"vocab_size": 10, "n_embd": 9, "n_head": 2, "n_layer": 1, "n_positions": 4})", "c.json", eps); })
                .find("impossible model"),
            std::string::npos);
  const models::GptConfig c = models::gpt2_config(ok + R"(, "layer_norm_epsilon": 1e-6})", "c.json", eps);
  EXPECT_EQ(c.d_ff, 32) << "n_inner absent: 4 x n_embd";
  EXPECT_EQ(eps, 1e-6);
  // A foreign tensor, and weights that do not fit the config.
  const std::string dir = (std::filesystem::temp_directory_path() / "troupe_gpt2_broken").string();
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kDir + "/config.json", dir + "/config.json", std::filesystem::copy_options::overwrite_existing);
  std::map<std::string, Tensor> tensors = graph::load_safetensors(kDir + "/model.safetensors").tensors;
  tensors["transformer.h.0.attn.rotary.weight"] = Tensor::zeros({2});
  graph::save_safetensors(dir + "/model.safetensors", tensors);
  EXPECT_NE(message_of([&] { models::load_gpt2(dir); }).find("'transformer.h.0.attn.rotary.weight', which is no GPT-2 weight"),
            std::string::npos);
  tensors.erase("transformer.h.0.attn.rotary.weight");
  tensors.erase("transformer.h.1.mlp.c_fc.bias");
  graph::save_safetensors(dir + "/model.safetensors", tensors);
  EXPECT_NE(message_of([&] { models::load_gpt2(dir); }).find("blocks.1.mlp.fc.bias"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
