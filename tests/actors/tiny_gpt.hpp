#pragma once
// A small GPT for the hybrid-parallel tests: token embeddings, two Transformer blocks of 4 heads
// (d_model 16, sequences of 8), a final LayerNorm and a head over 32 tokens, its training step, the
// token batches and the AdamW the tests train it with.
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/plan/stages.hpp"

namespace troupe::test {

struct TinyGpt : graph::Module {
  explicit TinyGpt(Generator& gen, std::int64_t d_ff = 0) {
    using namespace troupe::graph;
    wte = register_module("wte", std::make_shared<Embedding>(32, 16, gen));
    blocks = register_module("blocks", std::make_shared<Sequential>());
    for (int i = 0; i < 2; ++i) blocks->add(std::make_shared<GPTBlock>(16, 4, gen, d_ff));
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(16));
    head = register_module("head", std::make_shared<Linear>(16, 32, gen, false));
  }
  graph::Var loss(const graph::Var& ids, const graph::Var& targets) {
    const graph::SymDim rows = ids.size(0) * 8;  // symbolic when traced, a number when eager
    return cross_entropy((*head)((*ln_f)((*blocks)((*wte)(ids)))).reshape({rows, 32}), targets.reshape({rows}));
  }
  /// A pipeline stage (troupe/plan/stages.hpp) of blocks [begin, end): the embedding before them
  /// on the first stage, the head and the loss after them on the last; a later stage's input 0
  /// is the previous stage's output, before (ids, targets).
  std::vector<graph::Var> stage(const plan::StageSpan& span, const std::vector<graph::Var>& in) {
    const std::size_t batch = span.first ? 0 : 1;  // where (ids, targets) start
    graph::Var h = span.first ? (*wte)(in[0]) : in[0];
    for (int i = span.begin; i < span.end; ++i) h = blocks->at(static_cast<std::size_t>(i))(h);
    if (!span.last) return {h};
    const graph::SymDim rows = in[batch].size(0) * 8;
    return {cross_entropy((*head)((*ln_f)(h)).reshape({rows, 32}), in[batch + 1].reshape({rows}))};
  }
  /// stage() as the model's split into pipeline stages.
  plan::StagePolicy stages() {
    return {"tiny GPT blocks", 2, [this](const plan::StageSpan& span, const std::vector<graph::Var>& in) { return stage(span, in); }};
  }
  /// The traced training step: the loss of (ids, targets) [batch, 8] and its gradients, in `amp`'s precision.
  graph::TracedFunction step(const graph::AmpOptions& amp = {}) {
    using namespace troupe::graph;
    const SymDim b = SymDim::symbol("batch");
    return trace([this](const std::vector<Var>& in) { return std::vector<Var>{loss(in[0], in[1])}; },
                 {{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}})
        .with_amp(amp)
        .with_gradients();
  }
  std::shared_ptr<graph::Embedding> wte;
  std::shared_ptr<graph::Sequential> blocks;
  std::shared_ptr<graph::LayerNorm> ln_f;
  std::shared_ptr<graph::Linear> head;
};

/// Token ids in [0, 32) of shape [rows, 8], from a fixed sequence.
inline Tensor tiny_gpt_tokens(std::int64_t rows, std::uint64_t seed) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < rows * 8; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    v.push_back(static_cast<std::int64_t>(seed >> 59));
  }
  return Tensor::from_vector(v, {rows, 8});
}

/// AdamW at a learning rate that moves the weights visibly in 5 steps. Its eps is 1e-4, not 1e-8:
/// the keys' bias has a gradient that is zero but for rounding (attention does not change when
/// every key moves by the same vector), and at eps 1e-8 AdamW turns that noise, which differs
/// with the order of any sum, into steps of the learning rate's size in either direction: two
/// correct runs that sum in other orders would part there.
inline kernels::AdamWParams tiny_gpt_adamw() {
  kernels::AdamWParams hp;
  hp.lr = 1e-2;
  hp.eps = 1e-4;
  return hp;
}

}  // namespace troupe::test
