// Fused causal attention against the unfused ops it replaces (matmul, scale, causal_mask, softmax,
// matmul): values and gradients in f64 and f32, strided inputs, NaN, finite differences, dropout
// on the probabilities drawing what the unfused chain's dropout draws, and bad shapes refused
// naming the op.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "graph/gradcheck.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/dropout.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/attention.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {

Var unfused(const Var& q, const Var& k, const Var& v, double scale) {
  return matmul(softmax(causal_mask(matmul(q, k, false, true) * scale)), v);
}

struct Grads {
  Tensor y, dq, dk, dv;
};

// y and the gradients of weighted_sum(y) wrt q, k, v, through `attention`.
template <class F>
Grads run(F attention, const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  Var vq = Var::leaf(q), vk = Var::leaf(k), vv = Var::leaf(v);
  const Var y = attention(vq, vk, vv, scale);
  backward(test::weighted_sum(y));
  return {y.tensor(), vq.grad(), vk.grad(), vv.grad()};
}

void expect_fused_matches_unfused(const Shape& shape, DType dtype, double tolerance, std::uint64_t seed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.back()));
  const Tensor q = test::random_f64(shape, seed).to(dtype), k = test::random_f64(shape, seed + 1).to(dtype),
               v = test::random_f64(shape, seed + 2).to(dtype);
  const Grads fused = run([](const Var& a, const Var& b, const Var& c, double s) { return causal_attention(a, b, c, s); }, q, k, v, scale), plain = run(unfused, q, k, v, scale);
  EXPECT_LE(test::scaled_max_error(fused.y, plain.y), tolerance) << shape_str(shape);
  EXPECT_LE(test::scaled_max_error(fused.dq, plain.dq), tolerance) << shape_str(shape);
  EXPECT_LE(test::scaled_max_error(fused.dk, plain.dk), tolerance) << shape_str(shape);
  EXPECT_LE(test::scaled_max_error(fused.dv, plain.dv), tolerance) << shape_str(shape);
}

}  // namespace

TEST(CausalAttention, EqualsTheUnfusedOpsInDoublePrecision) {
  // T below, at and across the key tile of 64; D odd and even; batch and head dims.
  expect_fused_matches_unfused({1, 1, 1, 4}, DType::f64, 1e-13, 1);
  expect_fused_matches_unfused({2, 3, 7, 5}, DType::f64, 1e-13, 2);
  expect_fused_matches_unfused({1, 2, 64, 16}, DType::f64, 1e-13, 3);
  expect_fused_matches_unfused({2, 130, 8}, DType::f64, 1e-13, 4);
}

TEST(CausalAttention, EqualsTheUnfusedOpsInSinglePrecision) {
  expect_fused_matches_unfused({2, 4, 128, 64}, DType::f32, 2e-6, 5);
  expect_fused_matches_unfused({1, 1, 200, 32}, DType::f32, 2e-6, 6);
}

TEST(CausalAttention, GradientsMatchFiniteDifferences) {
  const std::vector<Tensor> in{test::random_f64({2, 9, 3}, 7), test::random_f64({2, 9, 3}, 8),
                               test::random_f64({2, 9, 3}, 9)};
  test::expect_gradients_match(
      [](const std::vector<Var>& x) { return test::weighted_sum(causal_attention(x[0], x[1], x[2], 0.7)); }, in);
}

// Dropout inside the kernel drops what dropout(softmax(...)) drops before the product with v,
// forward and backward, across key tiles, for [B, H, T, D] and [N, T, D].
TEST(CausalAttention, DropoutInTheKernelDrawsWhatTheUnfusedChainDraws) {
  const RandomScope position({5, 3, 10});
  for (const Shape& shape : {Shape{2, 3, 70, 8}, Shape{2, 130, 8}}) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape.back()));
    const Tensor q = test::random_f64(shape, 1), k = test::random_f64(shape, 2), v = test::random_f64(shape, 3);
    const Grads fused = run([](const Var& a, const Var& b, const Var& c, double s) { return causal_attention(a, b, c, s, 0.3, "attn"); },
                            q, k, v, scale);
    const Grads plain = run([](const Var& a, const Var& b, const Var& c, double s) {
      return matmul(dropout(softmax(causal_mask(matmul(a, b, false, true) * s)), 0.3, "attn"), c);
    }, q, k, v, scale);
    const Grads kept = run(unfused, q, k, v, scale);
    EXPECT_LE(test::scaled_max_error(fused.y, plain.y), 1e-13) << shape_str(shape);
    EXPECT_LE(test::scaled_max_error(fused.dq, plain.dq), 1e-13) << shape_str(shape);
    EXPECT_LE(test::scaled_max_error(fused.dk, plain.dk), 1e-13) << shape_str(shape);
    EXPECT_LE(test::scaled_max_error(fused.dv, plain.dv), 1e-13) << shape_str(shape);
    EXPECT_GT(test::scaled_max_error(fused.y, kept.y), 1e-2) << "dropout changed nothing";
  }
}

TEST(CausalAttention, DropoutGradientsMatchFiniteDifferences) {
  const RandomScope position({1, 2, 0});
  const std::vector<Tensor> in{test::random_f64({2, 9, 3}, 7), test::random_f64({2, 9, 3}, 8),
                               test::random_f64({2, 9, 3}, 9)};
  test::expect_gradients_match(
      [](const std::vector<Var>& x) { return test::weighted_sum(causal_attention(x[0], x[1], x[2], 0.7, 0.4, "attn")); }, in);
}

TEST(CausalAttention, TakesStridedInputs) {
  // [B, T, H, D] permuted to [B, H, T, D], as the attention layer's heads are.
  const Tensor q = test::random_f64({2, 6, 3, 4}, 10).permute({0, 2, 1, 3});
  const Tensor k = test::random_f64({2, 6, 3, 4}, 11).permute({0, 2, 1, 3});
  const Tensor v = test::random_f64({2, 6, 3, 4}, 12).permute({0, 2, 1, 3});
  ASSERT_FALSE(q.is_contiguous());
  const auto r = kernels::causal_attention(q, k, v, 0.5);
  const Tensor expected = unfused(Var(q), Var(k), Var(v), 0.5).tensor();
  EXPECT_LE(test::scaled_max_error(r.y, expected), 1e-13);
  EXPECT_EQ(r.lse.shape(), (Shape{2, 3, 6}));
}

TEST(CausalAttention, NanInAQueryRowStaysInThatRow) {
  Tensor q = test::random_f64({1, 5, 4}, 13);
  q.data<double>()[2 * 4 + 1] = std::numeric_limits<double>::quiet_NaN();  // row 2
  const auto r = kernels::causal_attention(q, test::random_f64({1, 5, 4}, 14), test::random_f64({1, 5, 4}, 15), 1.0);
  const auto y = test::values(r.y);
  for (int i = 0; i < 5; ++i)
    for (int d = 0; d < 4; ++d) EXPECT_EQ(std::isnan(y[static_cast<std::size_t>(i * 4 + d)]), i == 2) << i << "," << d;
}

TEST(CausalAttention, BadShapesAreRefusedNamingTheOp) {
  const Tensor a = test::random_f64({2, 4, 3}, 16), b = test::random_f64({2, 5, 3}, 17);
  EXPECT_THROW(
      try { kernels::causal_attention(a, b, a, 1.0); } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("causal_attention: q, k and v must have one shape"), std::string::npos);
        throw;
      },
      Error);
  EXPECT_THROW(causal_attention(Var(a), Var(a), Var(a.to(DType::f32)), 1.0), Error);
  EXPECT_THROW(kernels::causal_attention(test::random_f64({4}, 18), test::random_f64({4}, 18), test::random_f64({4}, 18), 1.0),
               Error);
}
