// DEBUG=true on the GPT model: each block's output, the embedding and the loss are printed with
// their gradients, eagerly and in the traced step; with DEBUG off the traced step has no print
// node and the model's dropout (off in evaluation mode) adds no node either.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/debug.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/models/gpt.hpp"

using namespace troupe;

namespace {

models::GptConfig tiny() {
  models::GptConfig c;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 32;
  c.seq = 8;
  return c;
}

std::size_t count(const graph::Graph& g, const std::string& op) {
  return static_cast<std::size_t>(std::count_if(g.nodes().begin(), g.nodes().end(), [&](const graph::Node& n) { return n.op == op; }));
}

graph::TracedFunction traced_step(models::Gpt& model) {
  const graph::SymDim b = graph::SymDim::symbol("batch");
  return graph::trace([&](const std::vector<graph::Var>& in) { return std::vector<graph::Var>{model.loss(in[0], in[1])}; },
                      {{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}})
      .with_gradients();
}

}  // namespace

TEST(GptDebug, BlocksPrintTheirStatisticsAndGradientsOnlyWithDebug) {
  Generator gen(3);
  models::Gpt model(tiny(), gen);
  graph::set_debug_enabled(false);
  const graph::TracedFunction off = traced_step(model);
  EXPECT_EQ(count(off.graph(), "debug_print"), 0u);
  graph::set_debug_enabled(true);
  const graph::TracedFunction on = traced_step(model);
  // embedding, block0, block1 and loss, each with its gradient.
  EXPECT_EQ(count(on.graph(), "debug_print"), 8u);
  EXPECT_EQ(on.graph().nodes().size(), off.graph().nodes().size() + 8);
  std::vector<std::int64_t> ids(16);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i * 7 % 256);
  const Tensor batch = Tensor::from_vector(ids, {2, 8});
  testing::internal::CaptureStderr();
  graph::backward(model.loss(graph::Var(batch), graph::Var(batch)));
  const std::string printed = testing::internal::GetCapturedStderr();
  graph::set_debug_enabled(false);
  for (const char* name : {"embedding: f32[2, 8, 16]", "block0: f32[2, 8, 16]", "block1: f32[2, 8, 16]", "loss: f32[]",
                           "block1.grad: f32[2, 8, 16]", "block0.grad", "embedding.grad"})
    EXPECT_NE(printed.find(std::string("[debug] ") + name), std::string::npos) << name << " in\n" << printed;
  EXPECT_LT(printed.find("[debug] block1.grad"), printed.find("[debug] block0.grad"));  // backward order
}

TEST(GptDebug, DropoutAddsNodesOnlyWhileTraining) {
  models::GptConfig c = tiny();
  c.dropout = 0.1;
  Generator gen(3);
  models::Gpt model(c, gen);
  const std::size_t training = count(traced_step(model).graph(), "dropout_mask");
  EXPECT_EQ(training, 3u * 2u);  // per block: the attention probabilities and both residual branches
  model.train(false);
  EXPECT_EQ(count(traced_step(model).graph(), "dropout_mask"), 0u);
}
