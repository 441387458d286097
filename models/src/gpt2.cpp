#include "troupe/models/gpt2.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <regex>
#include <tuple>

#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/weights.hpp"

namespace troupe::models {

namespace {

// Hugging Face's GPT-2 names -> this model's, and whether the tensor is a Conv1D weight ([in, out]).
struct Renamed {
  std::string name;
  bool conv1d = false;
};

std::optional<Renamed> troupe_name(const std::string& hf) {
  static const std::vector<std::tuple<std::regex, std::string, bool>> rules = {
      {std::regex(R"(^(transformer\.)?wte\.weight$)"), "wte.weight", false},
      {std::regex(R"(^(transformer\.)?wpe\.weight$)"), "wpe.weight", false},
      {std::regex(R"(^(transformer\.)?ln_f\.(weight|bias)$)"), "ln_f.$2", false},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.ln_1\.(weight|bias)$)"), "blocks.$2.ln1.$3", false},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.ln_2\.(weight|bias)$)"), "blocks.$2.ln2.$3", false},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.attn\.c_attn\.weight$)"), "blocks.$2.attn.qkv.weight", true},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.attn\.c_attn\.bias$)"), "blocks.$2.attn.qkv.bias", false},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.attn\.c_proj\.weight$)"), "blocks.$2.attn.proj.weight", true},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.attn\.c_proj\.bias$)"), "blocks.$2.attn.proj.bias", false},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.mlp\.c_fc\.weight$)"), "blocks.$2.mlp.fc.weight", true},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.mlp\.c_fc\.bias$)"), "blocks.$2.mlp.fc.bias", false},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.mlp\.c_proj\.weight$)"), "blocks.$2.mlp.proj.weight", true},
      {std::regex(R"(^(transformer\.)?h\.(\d+)\.mlp\.c_proj\.bias$)"), "blocks.$2.mlp.proj.bias", false},
      {std::regex(R"(^lm_head\.weight$)"), "lm_head.weight", false},
  };
  for (const auto& [pattern, replacement, conv1d] : rules)
    if (std::regex_match(hf, pattern)) return Renamed{std::regex_replace(hf, pattern, replacement), conv1d};
  return std::nullopt;
}

// The causal-mask buffers older checkpoints carry ("h.N.attn.bias", "h.N.attn.masked_bias"): not weights.
bool is_mask_buffer(const std::string& hf) {
  static const std::regex mask(R"(^(transformer\.)?h\.\d+\.attn\.(masked_)?bias$)");
  return std::regex_match(hf, mask);
}

}  // namespace

GptConfig gpt2_config(const std::string& config_json, const std::string& source, double& eps) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, "gpt2: ", source, " is not JSON (", printable(e.what()), ")");
  }
  TROUPE_CHECK(j.is_object(), io, "gpt2: ", source, " must be a JSON object");
  const auto integer = [&](const char* key) -> std::int64_t {
    TROUPE_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<std::int64_t>() > 0, io, "gpt2: ",
                 source, " needs \"", key, "\" as a positive integer", j.contains(key) ? ", got " + printable(j[key].dump()) : "");
    return j[key].get<std::int64_t>();
  };
  GptConfig c;
  c.vocab = integer("vocab_size");
  c.d_model = integer("n_embd");
  c.heads = integer("n_head");
  c.layers = integer("n_layer");
  c.seq = integer("n_positions");
  c.d_ff = j.contains("n_inner") && !j["n_inner"].is_null() ? integer("n_inner") : 4 * c.d_model;
  eps = 1e-5;
  if (j.contains("layer_norm_epsilon")) {
    TROUPE_CHECK(j["layer_norm_epsilon"].is_number() && j["layer_norm_epsilon"].get<double>() > 0, io, "gpt2: ",
                 source, " needs \"layer_norm_epsilon\" as a positive number");
    eps = j["layer_norm_epsilon"].get<double>();
  }
  const std::string activation = j.value("activation_function", std::string("gelu_new"));
  TROUPE_CHECK(activation == "gelu_new" || activation == "gelu_pytorch_tanh", unsupported, "gpt2: ", source,
               " asks for activation_function \"", printable(activation),
               "\"; this model computes GPT-2's tanh GELU (gelu_new, gelu_pytorch_tanh) only");
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(e.kind(), "gpt2: " + source + " describes an impossible model: " + e.message());
  }
  return c;
}

std::unique_ptr<Gpt> load_gpt2(const std::string& dir) {
  double eps = 1e-5;
  const GptConfig config = gpt2_config(read_text_file(dir + "/config.json", "a GPT-2 checkpoint folder holds config.json and model.safetensors (as Hugging Face saves them)"), dir + "/config.json", eps);
  const std::string file = dir + "/model.safetensors";
  const graph::SafetensorsFile saved = graph::load_safetensors(file);
  std::map<std::string, Tensor> weights;
  for (const auto& [name, t] : saved.tensors) {
    if (is_mask_buffer(name)) continue;
    const std::optional<Renamed> r = troupe_name(name);
    TROUPE_CHECK(r.has_value(), invalid_argument, "gpt2: ", file, " holds '", printable(name),
                 "', which is no GPT-2 weight; is this a GPT-2-family checkpoint?");
    TROUPE_CHECK(!r->conv1d || t.dim() == 2, shape_mismatch, "gpt2: ", file, ": '", printable(name), "' has shape ",
                 shape_str(t.shape()), "; a Conv1D weight is [in, out]");
    const Tensor f32 = t.to(DType::f32);
    weights[r->name] = r->conv1d ? f32.transpose(0, 1).contiguous() : f32;
  }
  // The head is tied to the token embedding; an untied checkpoint brings lm_head.weight itself.
  if (!weights.count("lm_head.weight") && weights.count("wte.weight")) weights["lm_head.weight"] = weights["wte.weight"].clone();
  Generator gen(0);
  auto model = std::make_unique<Gpt>(config, gen);
  load_weights_into(*model, weights, file, "pass a GPT-2-family checkpoint whose config.json matches its weights");
  for (const auto& block : model->block_list) block->ln1->eps = block->ln2->eps = eps;
  model->ln_f->eps = eps;
  return model;
}

}  // namespace troupe::models
