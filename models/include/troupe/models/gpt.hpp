#pragma once
// The GPT language model of troupe-gpt ("gpt-mini" by default): token and learned positional
// embeddings, pre-LayerNorm Transformer blocks, a final LayerNorm and an untied output head.
// Parameter names follow a plain PyTorch module of the same structure (see docs/APPS.md), so
// weights move between the two unchanged.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "troupe/graph/nn.hpp"
#include "troupe/plan/stages.hpp"

namespace troupe::models {

/// Shape of the model; the defaults are gpt-mini.
struct GptConfig {
  std::int64_t vocab = 256;    // byte-level
  std::int64_t d_model = 256;
  std::int64_t heads = 4;
  std::int64_t layers = 4;
  std::int64_t d_ff = 1024;
  std::int64_t seq = 128;      // context length (rows of the positional table)
  double dropout = 0;          // training's dropout on the attention probabilities and the residual branches
                               // (a setting of the training, not of the shape: fields() leaves it out)
  /// Throws naming the first setting that makes no sense (d_model not divisible by heads, ...).
  void validate() const;
  /// Each field with the name checkpoints store it under ("vocab", "d_model", "layers", "heads",
  /// "d_ff", "seq", in that order), so saving and loading a model's shape list the fields once.
  static const std::vector<std::pair<const char*, std::int64_t GptConfig::*>>& fields();
};

/// The model as a Module: wte, wpe, blocks.<i>.{ln1,attn.qkv,attn.proj,ln2,mlp.fc,mlp.proj}, ln_f, lm_head.
class Gpt : public graph::Module {
 public:
  Gpt(const GptConfig& config, Generator& gen);
  /// Next-token logits [B, T, vocab] for integer ids [B, T] (T <= config.seq).
  graph::Var logits(const graph::Var& ids);
  /// Incremental decoding, the prompt: logits() of ids [B, n], and every block's keys and values in
  /// `caches` (one per block, filled here) for config.seq positions.
  graph::Var prompt_logits(const graph::Var& ids, std::vector<graph::KvCache>& caches);
  /// Incremental decoding, one token per row: logits [B, 1, vocab] of ids [B, 1] at `positions`
  /// (i64 [B, 1], each below config.seq and after the row's cached ones), computed against the
  /// cached keys and values and its own; returns the token's keys and values per block in `fresh`
  /// (graph::write_step() stores them).
  graph::Var step_logits(const graph::Var& ids, const graph::Var& positions, const std::vector<graph::KvCache>& caches,
                         std::vector<graph::KvCache>& fresh);
  /// Mean cross-entropy of the logits of `ids` against `targets` (both [B, T]).
  graph::Var loss(const graph::Var& ids, const graph::Var& targets);
  /// A pipeline stage of blocks [span.begin, span.end) (troupe/plan/stages.hpp): the embeddings
  /// before them on the first stage (inputs ids, targets), the final LayerNorm, the head and the
  /// loss after them on the last; a later stage's input 0 is the previous stage's output [B, T, C].
  std::vector<graph::Var> stage(const plan::StageSpan& span, const std::vector<graph::Var>& inputs);
  /// stage() as the model's split into pipeline stages, over its blocks.
  plan::StagePolicy stages();

  GptConfig config;
  std::shared_ptr<graph::Embedding> wte, wpe;
  std::shared_ptr<graph::Sequential> blocks;
  std::vector<std::shared_ptr<graph::GPTBlock>> block_list;  // the blocks' layers, in order
  std::shared_ptr<graph::LayerNorm> ln_f;
  std::shared_ptr<graph::Linear> lm_head;

 private:
  // The token and position embeddings of ids [B, T] (T fixed, at most config.seq).
  graph::Var embed(const graph::Var& ids);
  // Blocks [begin, end) on h.
  graph::Var run_blocks(graph::Var h, int begin, int end);
};

/// Renames the parameters of a nanoGPT-style state dict ("transformer.h.0.attn.c_attn.weight", ...)
/// to this model's names; names already in Troupe's form pass unchanged.
std::map<std::string, Tensor> from_nanogpt_names(const std::map<std::string, Tensor>& state);

}  // namespace troupe::models
