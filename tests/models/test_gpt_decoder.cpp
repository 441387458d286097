// GptDecoder decoding several contexts together: each row's logits are those of decoding it alone
// (prompts of different lengths, rows joining and leaving the batch), steps run by an actor
// program equal the direct ones, and misuse is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/graph/var.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/gpt_decoder.hpp"

using namespace troupe;

namespace {

models::GptConfig small() {
  models::GptConfig c;
  c.d_model = 32;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 64;
  c.seq = 12;
  return c;
}

double worst(const std::vector<float>& a, const std::vector<float>& b) {
  return test::scaled_max_error(Tensor::from_vector(a, {static_cast<std::int64_t>(a.size())}),
                                Tensor::from_vector(b, {static_cast<std::int64_t>(b.size())}));
}

}  // namespace

TEST(GptDecoder, RowsDecodedTogetherEqualEachDecodedAlone) {
  Generator gen(2);
  models::Gpt model(small(), gen);
  graph::NoGradGuard no_grad;
  models::GptDecoder together(model, {}, true), alone(model, {}, true);
  std::vector<std::vector<std::int64_t>> contexts{{1, 2, 3}, {7}, {9, 8, 7, 6, 5}};
  std::vector<std::vector<float>> logits = together.add(contexts);
  EXPECT_EQ(together.positions(), (std::vector<std::int64_t>{3, 1, 5}));
  for (int step = 0; step < 5; ++step) {
    for (std::size_t r = 0; r < contexts.size(); ++r)
      EXPECT_LE(worst(logits[r], alone.next(contexts[r])), 1e-5) << "row " << r << ", step " << step;
    if (step == 1) {  // two rows join with prompts of one length (run together), past the first rows' room
      const std::vector<std::vector<std::int64_t>> joining{{4, 4}, {5, 6}};
      const std::vector<std::vector<float>> first = together.add(joining);
      for (std::size_t j = 0; j < joining.size(); ++j) {
        EXPECT_LE(worst(first[j], alone.next(joining[j])), 1e-5) << "joining row " << j;
        contexts.push_back(joining[j]);
        logits.push_back(first[j]);
      }
      EXPECT_EQ(together.positions(), (std::vector<std::int64_t>{4, 2, 6, 2, 2}));
    }
    if (step == 2) {  // row 1 leaves
      together.keep_rows({true, false, true, true, true});
      contexts.erase(contexts.begin() + 1);
    }
    std::vector<std::int64_t> tokens;
    for (std::size_t r = 0; r < contexts.size(); ++r) {
      tokens.push_back((step * 31 + static_cast<std::int64_t>(r) * 17) % 256);
      contexts[r].push_back(tokens.back());
    }
    logits = together.step(tokens);
  }
  for (std::size_t r = 0; r < contexts.size(); ++r) EXPECT_LE(worst(logits[r], alone.next(contexts[r])), 1e-5) << "row " << r;
  // Row 1 (5 + 5 = 10 positions, then 12) fills the model's 12 positions: another step is refused.
  EXPECT_EQ(together.positions(), (std::vector<std::int64_t>{8, 10, 6, 6}));
  together.step({1, 2, 3, 4});
  together.step({1, 2, 3, 4});
  EXPECT_THROW(together.step({1, 2, 3, 4}), Error);
  EXPECT_THROW(together.step({1}), Error);
  EXPECT_THROW(together.add({std::vector<std::int64_t>(13, 1)}), Error);
  EXPECT_THROW(together.add({{}}), Error);
}

// troupe-serve runs decoding steps as an actor program: the same logits as the traced step called
// directly, with the rows split into micro-batches or not.
TEST(GptDecoder, StepsRunByAnActorProgramEqualTheDirectOnes) {
  if (graph::jit_level() == 0) GTEST_SKIP() << "JIT_LEVEL=0 decodes eagerly, without a program";
  Generator gen(3);
  models::Gpt model(small(), gen);
  graph::NoGradGuard no_grad;
  actors::Engine engine(actors::EngineOptions{2});
  for (int micro_batches : {1, 2}) {
    models::GptDecoder direct(model, {}, true), on_actors(model, {}, true);
    on_actors.run_steps_on(engine, micro_batches);
    const std::vector<std::vector<std::int64_t>> prompts{{1, 2, 3}, {7}, {9, 8, 7, 6, 5}};
    std::vector<std::vector<float>> a = direct.add(prompts), b = on_actors.add(prompts);
    for (int step = 0; step < 4; ++step) {
      for (std::size_t r = 0; r < a.size(); ++r)
        EXPECT_LE(worst(b[r], a[r]), 1e-6) << micro_batches << " micro-batches, row " << r << ", step " << step;
      const std::vector<std::int64_t> tokens{step + 1, 2 * step + 3, 40};
      a = direct.step(tokens);
      b = on_actors.step(tokens);
    }
  }
}

// Nucleus sampling keeps the most likely tokens until their mass reaches top_p; top_p = 1 is
// top-k sampling unchanged; log-probabilities are the model's own.
TEST(Sampling, TopPKeepsTheNucleusAndLogprobsAreTheModels) {
  const std::vector<float> logits{std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  std::uint64_t rng = 3;
  std::map<std::int64_t, int> seen;
  for (int k = 0; k < 2000; ++k) ++seen[models::sample_token(logits, 1.0, 0, rng, 0.5)];
  EXPECT_EQ(seen.size(), 2u) << "0.4 + 0.3 reach 0.5: only the two most likely";
  EXPECT_NEAR(static_cast<double>(seen[0]) / seen[1], 4.0 / 3.0, 0.2);
  for (int k = 0; k < 100; ++k) EXPECT_EQ(models::sample_token(logits, 1.0, 0, rng, 0.01), 0);
  std::uint64_t a = 9, b = 9;
  for (int k = 0; k < 100; ++k) EXPECT_EQ(models::sample_token(logits, 0.7, 3, a), models::sample_token(logits, 0.7, 3, b, 1.0));
  EXPECT_THROW(models::sample_token(logits, 1.0, 0, rng, 0.0), Error);
  EXPECT_NEAR(models::token_logprob(logits, 1), std::log(0.3), 1e-6);
  EXPECT_NEAR(models::token_logprob({0.f, std::log(3.f)}, 0), std::log(0.25), 1e-6);
  EXPECT_THROW(models::token_logprob(logits, 4), Error);
}
