// Incremental decoding (graph/nn.hpp): a Transformer block run on a prompt and then one position
// at a time against its key/value cache gives what it gives on the whole sequence; a batch whose
// rows are at different positions gives each row's own result (each step returning its own keys
// and values, which write_step() stores); traced steps equal eager ones; a
// bf16 model decodes in bf16; and a step without a filled cache, or a prompt longer than the cache,
// is refused.
#include <gtest/gtest.h>

#include "kernels/reference.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {

constexpr std::int64_t kCapacity = 8;

Tensor positions(std::vector<std::int64_t> p) {
  const auto b = static_cast<std::int64_t>(p.size());
  return Tensor::from_vector(p, {b, 1});
}

}  // namespace

TEST(KvCache, PromptThenStepsEqualTheWholeSequence) {
  Generator gen(4);
  GPTBlock block(16, 2, gen);
  NoGradGuard no_grad;
  const Tensor x = test::random_tensor({2, 7, 16}, 1);
  const Tensor whole = block(x).tensor();
  KvCache cache;
  const Tensor first = block.prompt(x.slice(1, 0, 3), kCapacity, cache).tensor();
  EXPECT_EQ(cache.k.tensor().shape(), (Shape{2, 2, kCapacity, 8}));
  EXPECT_LE(test::scaled_max_error(first, whole.slice(1, 0, 3).contiguous()), 1e-6);
  for (std::int64_t p = 3; p < 7; ++p) {
    KvCache fresh;
    const Tensor y = block.step(x.slice(1, p, p + 1), decode_position(positions({p, p}), kCapacity), cache, fresh).tensor();
    EXPECT_EQ(fresh.k.tensor().shape(), (Shape{2, 2, 1, 8}));
    write_step(cache.k.tensor(), fresh.k.tensor(), {p, p});
    write_step(cache.v.tensor(), fresh.v.tensor(), {p, p});
    EXPECT_LE(test::scaled_max_error(y, whole.slice(1, p, p + 1).contiguous()), 1e-5);
  }
}

TEST(KvCache, RowsOfABatchStepAtTheirOwnPositions) {
  Generator gen(5);
  GPTBlock block(16, 2, gen);
  NoGradGuard no_grad;
  const Tensor a = test::random_tensor({1, 4, 16}, 2), b = test::random_tensor({1, 6, 16}, 3);
  KvCache ca, cb;
  block.prompt(a.slice(1, 0, 3), kCapacity, ca);  // row 0 has 3 positions, row 1 has 5
  block.prompt(b.slice(1, 0, 5), kCapacity, cb);
  KvCache both{concat({ca.k, cb.k}, 0), concat({ca.v, cb.v}, 0)};
  const Tensor next = concat({a.slice(1, 3, 4), b.slice(1, 5, 6)}, 0).tensor();
  KvCache fresh;
  const Tensor y = block.step(next, decode_position(positions({3, 5}), kCapacity), both, fresh).tensor();
  EXPECT_LE(test::scaled_max_error(y.slice(0, 0, 1).contiguous(), block(a).tensor().slice(1, 3, 4).contiguous()), 1e-5);
  EXPECT_LE(test::scaled_max_error(y.slice(0, 1, 2).contiguous(), block(b).tensor().slice(1, 5, 6).contiguous()), 1e-5);
}

TEST(KvCache, ATracedStepEqualsTheEagerOne) {
  Generator gen(6);
  GPTBlock block(16, 2, gen);
  NoGradGuard no_grad;
  const Tensor x = test::random_tensor({1, 5, 16}, 4);
  KvCache cache;
  block.prompt(x.slice(1, 0, 4), kCapacity, cache);
  KvCache eager_fresh;
  const Tensor eager = block.step(x.slice(1, 4, 5), decode_position(positions({4}), kCapacity), cache, eager_fresh).tensor();
  for (int level : {1, 3}) {
    Jit step(
        [&](const std::vector<Var>& in) {
          KvCache fresh;
          const Var y = block.step(in[0], decode_position(in[1], kCapacity), {in[2], in[3]}, fresh);
          return std::vector<Var>{y, fresh.k, fresh.v};
        },
        {{"x", {1, 1, 16}}, {"position", {1, 1}, DType::i64}, {"k", {1, 2, kCapacity, 8}}, {"v", {1, 2, kCapacity, 8}}},
        false, level);
    const std::vector<Tensor> out = step({x.slice(1, 4, 5).contiguous(), positions({4}), cache.k.tensor(), cache.v.tensor()});
    EXPECT_LE(test::scaled_max_error(out[0], eager), 1e-6);
    EXPECT_LE(test::scaled_max_error(out[1], eager_fresh.k.tensor()), 1e-6);
  }
}

// A model converted to bf16 for serving (Module::to) keeps its cache and position tables in bf16
// and tracks its own whole-sequence result within bf16 rounding.
TEST(KvCache, ABf16ModelDecodesInBf16) {
  if (!kernels::native_low_precision(DType::bf16)) GTEST_SKIP() << "no native bf16 on this CPU";
  Generator gen(8);
  GPTBlock block(16, 2, gen);
  block.to(DType::bf16);
  NoGradGuard no_grad;
  const Tensor x = test::random_tensor({1, 5, 16}, 9).to(DType::bf16);
  const Tensor whole = block(x).tensor().to(DType::f32);
  KvCache cache;
  block.prompt(x.slice(1, 0, 4), kCapacity, cache);
  EXPECT_EQ(cache.k.dtype(), DType::bf16);
  KvCache fresh;
  const Tensor y =
      block.step(x.slice(1, 4, 5), decode_position(positions({4}), kCapacity, DType::bf16), cache, fresh).tensor();
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_LE(test::scaled_max_error(y.to(DType::f32), whole.slice(1, 4, 5).contiguous()), 3e-2);
}

TEST(KvCache, AStepWithoutAPromptOrAPromptPastTheCacheIsRefused) {
  Generator gen(7);
  CausalSelfAttention attn(16, 2, gen);
  NoGradGuard no_grad;
  KvCache empty;
  try {
    KvCache fresh;
    attn.step(test::random_tensor({1, 1, 16}, 5), decode_position(positions({0}), kCapacity), empty, fresh);
    ADD_FAILURE() << "a step without a cache ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the cache its prompt filled"), std::string::npos) << e.what();
  }
  KvCache cache;
  EXPECT_THROW(attn.prompt(test::random_tensor({1, kCapacity + 1, 16}, 6), kCapacity, cache), Error);
  attn.prompt(test::random_tensor({1, 2, 16}, 7), kCapacity, cache);
  KvCache fresh;
  EXPECT_THROW(attn.step(test::random_tensor({1, 2, 16}, 8), decode_position(positions({2}), kCapacity), cache, fresh), Error);
  // write_step() refuses a position outside the cache, and a step with another number of rows.
  attn.step(test::random_tensor({1, 1, 16}, 9), decode_position(positions({2}), kCapacity), cache, fresh);
  EXPECT_THROW(write_step(cache.k.tensor(), fresh.k.tensor(), {kCapacity}), Error);
  EXPECT_THROW(write_step(cache.k.tensor(), fresh.k.tensor(), {2, 3}), Error);
}
