#pragma once
// A small GPT for the hybrid-parallel tests: token embeddings, two Transformer blocks of 4 heads
// (d_model 16, sequences of 8), a final LayerNorm and a head over 32 tokens, and its training step.
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"

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
    using graph::SymDim;
    return cross_entropy((*head)((*ln_f)((*blocks)((*wte)(ids)))).reshape({SymDim::symbol("batch") * 8, 32}),
                         targets.reshape({SymDim::symbol("batch") * 8}));
  }
  /// The traced training step: the loss of (ids, targets) [batch, 8] and its gradients.
  graph::TracedFunction step() {
    using namespace troupe::graph;
    const SymDim b = SymDim::symbol("batch");
    return trace([this](const std::vector<Var>& in) { return std::vector<Var>{loss(in[0], in[1])}; },
                 {{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}})
        .with_gradients();
  }
  std::shared_ptr<graph::Embedding> wte;
  std::shared_ptr<graph::Sequential> blocks;
  std::shared_ptr<graph::LayerNorm> ln_f;
  std::shared_ptr<graph::Linear> head;
};

}  // namespace troupe::test
