#include "troupe/models/gpt.hpp"

#include <numeric>
#include <regex>
#include <vector>

#include "troupe/graph/debug.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::models {

using graph::Var;

void GptConfig::validate() const {
  auto positive = [](const char* name, std::int64_t v) {
    TROUPE_CHECK(v > 0, invalid_argument, "gpt: ", name, " must be positive, got ", v);
  };
  positive("vocab", vocab);
  positive("d_model", d_model);
  positive("heads", heads);
  positive("layers", layers);
  positive("d_ff", d_ff);
  positive("seq", seq);
  TROUPE_CHECK(dropout >= 0 && dropout < 1, invalid_argument, "gpt: dropout must be in [0, 1), got ", dropout);
  TROUPE_CHECK(d_model % heads == 0, invalid_argument, "gpt: d_model ", d_model, " is not divisible by heads ", heads,
               "; pick heads that divide it (head dim = d_model / heads)");
}

const std::vector<std::pair<const char*, std::int64_t GptConfig::*>>& GptConfig::fields() {
  static const std::vector<std::pair<const char*, std::int64_t GptConfig::*>> all{
      {"vocab", &GptConfig::vocab}, {"d_model", &GptConfig::d_model}, {"layers", &GptConfig::layers},
      {"heads", &GptConfig::heads}, {"d_ff", &GptConfig::d_ff},         {"seq", &GptConfig::seq}};
  return all;
}

Gpt::Gpt(const GptConfig& cfg, Generator& gen) : config(cfg) {
  config.validate();
  // GPT-2's embedding scale: N(0, 0.02^2) rather than the N(0, 1) of a bare nn.Embedding.
  wte = register_module("wte", std::make_shared<graph::Embedding>(cfg.vocab, cfg.d_model, gen, 0.02));
  wpe = register_module("wpe", std::make_shared<graph::Embedding>(cfg.seq, cfg.d_model, gen, 0.02));
  blocks = register_module("blocks", std::make_shared<graph::Sequential>());
  for (std::int64_t i = 0; i < cfg.layers; ++i) {
    block_list.push_back(std::make_shared<graph::GPTBlock>(cfg.d_model, cfg.heads, gen, cfg.d_ff));
    block_list.back()->dropout = block_list.back()->attn->dropout = cfg.dropout;
    blocks->add(block_list.back());
  }
  ln_f = register_module("ln_f", std::make_shared<graph::LayerNorm>(cfg.d_model));
  lm_head = register_module("lm_head", std::make_shared<graph::Linear>(cfg.d_model, cfg.vocab, gen, false));
}

Var Gpt::embed(const Var& ids) {
  TROUPE_CHECK(ids.dim() == 2 && ids.shape()[1].is_static(), shape_mismatch, "gpt: ids must be [batch, time] with a fixed time, got ",
               sym_shape_str(ids.shape()));
  const std::int64_t t = ids.shape()[1].size();
  TROUPE_CHECK(t >= 1 && t <= config.seq, shape_mismatch, "gpt: sequence of ", t, " tokens does not fit the context of ",
               config.seq, " (--seq)");
  std::vector<std::int64_t> positions(static_cast<std::size_t>(t));
  std::iota(positions.begin(), positions.end(), 0);
  const Var pos = (*wpe)(Tensor::from_vector(positions, {t}));  // [T, C], broadcast over the batch
  // DEBUG=true: each block's output and its gradient, printed per step; nothing otherwise.
  return graph::debug_print("embedding", (*wte)(ids) + pos);
}

Var Gpt::run_blocks(Var h, int begin, int end) {
  for (int i = begin; i < end; ++i) h = graph::debug_print("block" + std::to_string(i), (*block_list[static_cast<std::size_t>(i)])(h));
  return h;
}

Var Gpt::logits(const Var& ids) {
  return (*lm_head)((*ln_f)(run_blocks(embed(ids), 0, static_cast<int>(block_list.size()))));
}

Var Gpt::prompt_logits(const Var& ids, std::vector<graph::KvCache>& caches) {
  const std::int64_t t = ids.dim() == 2 && ids.shape()[1].is_static() ? ids.shape()[1].size() : 0;
  TROUPE_CHECK(t >= 1 && t <= config.seq, shape_mismatch, "gpt: a prompt must be [batch, time] with 1 to ", config.seq,
               " (--seq) tokens, got ", sym_shape_str(ids.shape()));
  std::vector<std::int64_t> positions(static_cast<std::size_t>(t));
  std::iota(positions.begin(), positions.end(), 0);
  caches.assign(block_list.size(), {});
  Var h = (*wte)(ids) + (*wpe)(Tensor::from_vector(positions, {t}));
  for (std::size_t i = 0; i < block_list.size(); ++i) h = block_list[i]->prompt(h, config.seq, caches[i]);
  return (*lm_head)((*ln_f)(h));
}

Var Gpt::step_logits(const Var& ids, const Var& positions, const std::vector<graph::KvCache>& caches,
                     std::vector<graph::KvCache>& fresh) {
  TROUPE_CHECK(caches.size() == block_list.size(), invalid_argument, "gpt: ", caches.size(), " key/value caches for ",
               block_list.size(), " blocks; fill them with prompt_logits() first");
  const graph::DecodePosition at = graph::decode_position(positions, config.seq, wte->weight.dtype());
  Var h = (*wte)(ids) + (*wpe)(positions);  // [B, 1, C] each
  fresh.assign(block_list.size(), {});
  for (std::size_t i = 0; i < block_list.size(); ++i) h = block_list[i]->step(h, at, caches[i], fresh[i]);
  return (*lm_head)((*ln_f)(h));
}

Var Gpt::loss(const Var& ids, const Var& targets) {
  return graph::debug_print("loss", graph::cross_entropy(logits(ids), targets));
}

std::vector<Var> Gpt::stage(const plan::StageSpan& span, const std::vector<Var>& inputs) {
  const std::size_t batch = span.first ? 0 : 1;  // where (ids, targets) are among the inputs
  TROUPE_CHECK(inputs.size() == batch + 2, invalid_argument, "gpt stage: ", inputs.size(), " inputs; a stage takes ",
               span.first ? "(ids, targets)" : "(the previous stage's output, ids, targets)");
  const Var h = run_blocks(span.first ? embed(inputs[0]) : inputs[0], span.begin, span.end);
  if (!span.last) return {h};
  return {graph::debug_print("loss", graph::cross_entropy((*lm_head)((*ln_f)(h)), inputs[batch + 1]))};
}

plan::StagePolicy Gpt::stages() {
  return {"GPT blocks", static_cast<int>(block_list.size()),
          [this](const plan::StageSpan& span, const std::vector<Var>& inputs) { return stage(span, inputs); }};
}

std::map<std::string, Tensor> from_nanogpt_names(const std::map<std::string, Tensor>& state) {
  // nanoGPT's modules are nn.Linear/nn.LayerNorm like ours ([out, in] weights), so only names differ.
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^transformer\.wte\.)"), "wte."},
      {std::regex(R"(^transformer\.wpe\.)"), "wpe."},
      {std::regex(R"(^transformer\.ln_f\.)"), "ln_f."},
      {std::regex(R"(^transformer\.h\.(\d+)\.ln_1\.)"), "blocks.$1.ln1."},
      {std::regex(R"(^transformer\.h\.(\d+)\.ln_2\.)"), "blocks.$1.ln2."},
      {std::regex(R"(^transformer\.h\.(\d+)\.attn\.c_attn\.)"), "blocks.$1.attn.qkv."},
      {std::regex(R"(^transformer\.h\.(\d+)\.attn\.c_proj\.)"), "blocks.$1.attn.proj."},
      {std::regex(R"(^transformer\.h\.(\d+)\.mlp\.c_fc\.)"), "blocks.$1.mlp.fc."},
      {std::regex(R"(^transformer\.h\.(\d+)\.mlp\.c_proj\.)"), "blocks.$1.mlp.proj."},
  };
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : state) {
    std::string renamed = name;
    for (const auto& [pattern, replacement] : rules) {
      if (std::regex_search(renamed, pattern)) {
        renamed = std::regex_replace(renamed, pattern, replacement);
        break;
      }
    }
    TROUPE_CHECK(out.emplace(renamed, t).second, invalid_argument, "gpt weights: '", name, "' and another tensor both map to '",
                 renamed, "'");
  }
  return out;
}

}  // namespace troupe::models
