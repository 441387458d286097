#include "troupe/models/saved.hpp"

#include <filesystem>
#include <map>
#include <utility>

#include "troupe/kernels/error.hpp"
#include "troupe/models/checkpoint.hpp"
#include "troupe/models/weights.hpp"

namespace troupe::models {

std::unique_ptr<SrLite> load_sr_lite(const std::string& path, SrConfig config) {
  std::map<std::string, Tensor> weights;
  std::string file = path, advice = "pass weights written by troupe-sr (--save) for this model shape (channels, blocks)";
  if (std::filesystem::is_directory(path)) {
    Checkpoint c = load_checkpoint(path, "troupe-sr");
    config.channels = c.state.int_at("channels");
    config.blocks = c.state.int_at("blocks");
    config.activation = parse_activation(c.state.string_at("act"));
    weights = std::move(c.model);
    file = c.folder + "/model.safetensors";
    advice = "the checkpoint is damaged or from another model";
  } else {
    weights = read_weights(path, "give a troupe-sr checkpoint folder or a .safetensors file");
  }
  Generator gen(0);
  auto model = std::make_unique<SrLite>(config, gen);
  load_weights_into(*model, weights, file, advice);
  return model;
}

std::unique_ptr<Gpt> load_gpt(const std::string& path, GptConfig config) {
  std::map<std::string, Tensor> weights;
  std::string file = path, advice = "pass weights of this model shape (d_model, layers, heads, d_ff, seq), with Troupe or nanoGPT names";
  if (std::filesystem::is_directory(path)) {
    Checkpoint c = load_checkpoint(path, "troupe-gpt");
    for (const auto& [key, field] : GptConfig::fields()) config.*field = c.state.int_at(key);
    weights = std::move(c.model);
    file = c.folder + "/model.safetensors";
    advice = "the checkpoint is damaged or from another model";
  } else {
    weights = from_nanogpt_names(read_weights(path, "give a troupe-gpt checkpoint folder or a .safetensors file"));
  }
  Generator gen(0);
  auto model = std::make_unique<Gpt>(config, gen);
  load_weights_into(*model, weights, file, advice);
  return model;
}

}  // namespace troupe::models
