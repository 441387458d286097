#pragma once
// The standard layers, each a Module whose parameters follow PyTorch's names and layouts (Linear
// weight [out, in], Conv2d weight [out, in, kh, kw]) so weights move between the two unchanged.
// Initial values come from a counter-based Generator: the same seed gives the same model anywhere.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "troupe/graph/module.hpp"
#include "troupe/kernels/rng.hpp"

namespace troupe::graph {

/// y = x W^T + b over the last dim; W [out, in] and b [out] start uniform in +-1/sqrt(in), as in PyTorch.
class Linear : public Layer {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, Generator& gen, bool bias = true);
  Var forward(const Var& x) override;
  Var weight, bias;  // bias undefined when built without one
};

/// Rows of a [num_embeddings, dim] table looked up by integer ids; starts N(0, init_std^2).
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t dim, Generator& gen, double init_std = 1.0);
  /// The rows of `ids` (any shape): ids.shape + [dim].
  Var forward(const Var& ids);
  Var operator()(const Var& ids) { return forward(ids); }
  Var weight;
};

/// Layer normalisation over the last dim with gain (ones) and bias (zeros) of size `dim`.
class LayerNorm : public Layer {
 public:
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5);
  Var forward(const Var& x) override;
  Var weight, bias;
  double eps;
};

/// NCHW 2-D convolution with a square kernel, stride and zero padding; weights as PyTorch initialises them.
class Conv2d : public Layer {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Generator& gen,
         std::int64_t stride = 1, std::int64_t padding = 0, bool bias = true);
  Var forward(const Var& x) override;
  Var weight, bias;
  std::int64_t stride, padding;
};

/// relu as a layer, for Sequential.
class ReLU : public Layer {
 public:
  Var forward(const Var& x) override;
};

/// [N, C*r*r, H, W] -> [N, C, H*r, W*r] as a layer (super-resolution heads).
class PixelShuffle : public Layer {
 public:
  explicit PixelShuffle(std::int64_t upscale) : upscale(upscale) {}
  Var forward(const Var& x) override;
  std::int64_t upscale;
};

/// The keys and values an attention layer keeps for incremental decoding, which computes each new
/// token's position alone against them instead of the whole context again: [batch, heads,
/// capacity, head_dim] each, zero past the positions written. A fixed capacity keeps every decoding
/// step's shapes the same, so one trace serves every position, and rows of a batch may be at
/// different positions.
struct KvCache {
  Var k, v;
};

/// What a decoding step reads of a KvCache (decode_position()): `bias` [batch, 1, 1, capacity] is 0
/// before each row's position and -inf from it on, hiding the positions not yet written.
struct DecodePosition {
  Var bias;
};

/// The DecodePosition of `positions` (i64 [batch, 1], each below `capacity`), looked up in a
/// constant table, so a traced step takes the positions as an input; in `dtype`, the caches' dtype.
DecodePosition decode_position(const Var& positions, std::int64_t capacity, DType dtype = DType::f32);

/// Stores a step's new keys or values `fresh` ([batch, heads, 1, head_dim]) into the first rows of
/// `cache` ([rows, heads, capacity, head_dim]), row r at positions[r], in place: a step leaves its
/// cache unchanged, so the caller keeps it up to date.
void write_step(const Tensor& cache, const Tensor& fresh, const std::vector<std::int64_t>& positions);

/// Causal multi-head self-attention over x [B, T, C]: one qkv projection [3C, C], explicit
/// softmax(q k^T / sqrt(C/H)) with future positions masked, then an output projection.
class CausalSelfAttention : public Layer {
 public:
  CausalSelfAttention(std::int64_t dim, std::int64_t heads, Generator& gen);
  Var forward(const Var& x) override;
  /// forward() over a prompt x [batch, n, dim], whose keys and values fill `cache` for `capacity`
  /// positions (n <= capacity).
  Var prompt(const Var& x, std::int64_t capacity, KvCache& cache);
  /// One more position per row, x [batch, 1, dim] at `at`: it attends to the cached positions before
  /// its own and to itself, and returns its keys and values in `fresh` (for write_step()).
  Var step(const Var& x, const DecodePosition& at, const KvCache& cache, KvCache& fresh);
  std::int64_t dim, heads;
  std::shared_ptr<Linear> qkv, proj;
  double dropout = 0;  // on the attention probabilities, while training (forward only, not prompt or step)
};

/// Two-layer feed-forward block: proj(gelu(fc(x))), hidden size `hidden`.
class MLP : public Layer {
 public:
  MLP(std::int64_t dim, std::int64_t hidden, Generator& gen);
  Var forward(const Var& x) override;
  std::shared_ptr<Linear> fc, proj;
};

/// Pre-LN Transformer block: x + attn(ln1(x)), then + mlp(ln2(x)); the MLP's hidden size is
/// `hidden` (0 = 4 * dim, GPT-2's ratio).
class GPTBlock : public Layer {
 public:
  GPTBlock(std::int64_t dim, std::int64_t heads, Generator& gen, std::int64_t hidden = 0);
  Var forward(const Var& x) override;
  /// forward() over a prompt, filling the attention's `cache` (CausalSelfAttention::prompt).
  Var prompt(const Var& x, std::int64_t capacity, KvCache& cache);
  /// One decoding step (CausalSelfAttention::step).
  Var step(const Var& x, const DecodePosition& at, const KvCache& cache, KvCache& fresh);
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
  double dropout = 0;  // on both residual branches before they are added, while training (forward only)
};

/// Layers applied in order; children are named "0", "1", ...
class Sequential : public Layer {
 public:
  Sequential() = default;
  /// Appends `layer` and returns *this.
  Sequential& add(std::shared_ptr<Layer> layer);
  Var forward(const Var& x) override;
  /// Number of layers.
  std::size_t size() const { return layers_.size(); }
  /// Layer `i` (a pipeline stage runs a run of them).
  Layer& at(std::size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace troupe::graph
