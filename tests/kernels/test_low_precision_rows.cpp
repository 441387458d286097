// The bf16 and f16 row kernels that pure low precision (--amp O3) runs: softmax, layer norm,
// cross-entropy, embedding, the causal mask and fused attention, forward and backward. Each widens
// its rows to f32, runs the f32 kernel's row code and rounds once, so its result is exactly the
// f32 kernel's on the widened inputs, rounded; statistics (layer-norm mean and rstd, the attention's
// log-sum-exp) and the loss are f32 and equal the f32 kernel's bit for bit. Mixed dtypes are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/reference.hpp"
#include "troupe/kernels/attention.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/embedding.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/layernorm.hpp"
#include "troupe/kernels/loss.hpp"
#include "troupe/kernels/select.hpp"
#include "troupe/kernels/softmax.hpp"

using namespace troupe;
using namespace troupe::kernels;
using test::random_tensor;
using test::values;

namespace {

const DType kLow[] = {DType::bf16, DType::f16};

// `got` (low precision, or f32 for statistics) equals `want` (f32) rounded to got's dtype, bit for bit.
void expect_rounded(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = values(got), w = values(want.to(got.dtype()));
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_TRUE(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))) << what << " element " << i << ": " << g[i]
                                                                         << " vs " << w[i];
}

// A low-precision copy of f32 `t`, and that copy widened back: the inputs both kernels see.
std::pair<Tensor, Tensor> low_and_wide(const Tensor& t, DType low) {
  Tensor l = t.to(low);
  return {l, l.to(DType::f32)};
}

}  // namespace

TEST(LowPrecisionRows, SoftmaxAndLogSoftmaxAlongAnyAxis) {
  for (DType low : kLow) {
    const std::string name = dtype_name(low);
    auto [x, xw] = low_and_wide(random_tensor({5, 37}, 1, -4.0, 4.0), low);
    auto [g, gw] = low_and_wide(random_tensor({5, 37}, 2), low);
    expect_rounded(softmax(x), softmax(xw), "softmax " + name);
    expect_rounded(log_softmax(x), log_softmax(xw), "log_softmax " + name);
    const Tensor y = softmax(x), ly = log_softmax(x);
    expect_rounded(softmax_backward(g, y), softmax_backward(gw, y.to(DType::f32)), "softmax_backward " + name);
    expect_rounded(log_softmax_backward(g, ly), log_softmax_backward(gw, ly.to(DType::f32)), "log_softmax_backward " + name);
    // Another axis is moved last: the result is the last-axis kernel's on the transposed rows.
    const Tensor along0 = softmax(x, 0);
    EXPECT_EQ(along0.dtype(), low);
    expect_rounded(along0, softmax(xw.transpose(0, 1).contiguous()).transpose(0, 1), "softmax axis 0 " + name);
    const Tensor y0 = softmax(xw, 0).to(low);
    expect_rounded(softmax_backward(g, y0, 0),
                   softmax_backward(gw.transpose(0, 1).contiguous(), y0.to(DType::f32).transpose(0, 1).contiguous())
                       .transpose(0, 1),
                   "softmax_backward axis 0 " + name);
  }
}

TEST(LowPrecisionRows, LayerNormKeepsF32StatisticsAndItsGradientsTrackF32) {
  for (DType low : kLow) {
    const std::string name = dtype_name(low);
    auto [x, xw] = low_and_wide(random_tensor({6, 40}, 3, -2.0, 3.0), low);
    auto [gamma, gammaw] = low_and_wide(random_tensor({40}, 4, 0.5, 1.5), low);
    auto [beta, betaw] = low_and_wide(random_tensor({40}, 5), low);
    const LayerNormOutput r = layernorm(x, gamma, beta), rw = layernorm(xw, gammaw, betaw);
    expect_rounded(r.y, rw.y, "layernorm y " + name);
    EXPECT_EQ(r.mean.dtype(), DType::f32);
    expect_rounded(r.mean, rw.mean, "layernorm mean " + name);
    expect_rounded(r.rstd, rw.rstd, "layernorm rstd " + name);
    auto [dy, dyw] = low_and_wide(random_tensor({6, 40}, 6), low);
    const LayerNormGrads d = layernorm_backward(dy, x, gamma, r.mean, r.rstd);
    const LayerNormGrads dw = layernorm_backward(dyw, xw, gammaw, r.mean, r.rstd);
    expect_rounded(d.dx, dw.dx, "layernorm dx " + name);
    expect_rounded(d.dgamma, dw.dgamma, "layernorm dgamma " + name);
    expect_rounded(d.dbeta, dw.dbeta, "layernorm dbeta " + name);
    // The fused residual add rounds the sum as the add kernel does, then normalises it.
    auto [b, bw] = low_and_wide(random_tensor({40}, 7), low);
    const AddLayerNormOutput s = add_layernorm(x, b, gamma, beta);
    expect_rounded(s.sum, add(xw, bw), "add_layernorm sum " + name);
    const LayerNormOutput of_sum = layernorm(s.sum.to(DType::f32), gammaw, betaw);
    expect_rounded(s.y, of_sum.y, "add_layernorm y " + name);
    expect_rounded(s.rstd, of_sum.rstd, "add_layernorm rstd " + name);
    // Statistics in the low dtype, or gamma in another dtype than x, are refused in one line.
    try {
      layernorm_backward(dy, x, gamma, r.mean.to(low), r.rstd);
      ADD_FAILURE() << "low-precision mean accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mean"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("must be f32"), std::string::npos) << e.what();
    }
    EXPECT_THROW(layernorm(x, gammaw, beta), Error);
  }
}

TEST(LowPrecisionRows, CrossEntropyGivesAnF32LossFromLowLogits) {
  for (DType low : kLow) {
    const std::string name = dtype_name(low);
    auto [logits, wide] = low_and_wide(random_tensor({7, 33}, 8, -3.0, 3.0), low);
    const Tensor targets = Tensor::from_vector(std::vector<std::int64_t>{0, 5, 32, 7, 7, 1, 20}, {7});
    const Tensor loss = cross_entropy(logits, targets);
    EXPECT_EQ(loss.dtype(), DType::f32);
    EXPECT_EQ(loss.item(), cross_entropy(wide, targets).item()) << name;
    const Tensor g = Tensor::full({}, 0.75);
    expect_rounded(cross_entropy_backward(g, logits, targets), cross_entropy_backward(g, wide, targets),
                   "cross_entropy_backward " + name);
    EXPECT_THROW(cross_entropy_backward(g.to(low), logits, targets), Error);  // the loss's gradient is f32
  }
}

TEST(LowPrecisionRows, EmbeddingGathersAndSumsItsGradientInF32) {
  for (DType low : kLow) {
    const std::string name = dtype_name(low);
    auto [w, ww] = low_and_wide(random_tensor({9, 12}, 9), low);
    const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{3, 0, 3, 8, 3, 1}, {2, 3});
    expect_rounded(embedding(w, ids), embedding(ww, ids), "embedding " + name);
    auto [g, gw] = low_and_wide(random_tensor({2, 3, 12}, 10), low);
    expect_rounded(embedding_backward(g, ids, 9), embedding_backward(gw, ids, 9), "embedding_backward " + name);
  }
}

TEST(LowPrecisionRows, CausalMaskAndFusedAttention) {
  for (DType low : kLow) {
    const std::string name = dtype_name(low);
    auto [s, sw] = low_and_wide(random_tensor({2, 5, 5}, 11), low);
    expect_rounded(causal_mask(s, -1e4), causal_mask(sw, -1e4), "causal_mask " + name);
    // Two heads of 70 queries: the kernels' tiles of 64 rows, one full and one partial.
    auto [q, qw] = low_and_wide(random_tensor({2, 70, 16}, 12), low);
    auto [k, kw] = low_and_wide(random_tensor({2, 70, 16}, 13), low);
    auto [v, vw] = low_and_wide(random_tensor({2, 70, 16}, 14), low);
    const AttentionResult r = causal_attention(q, k, v, 0.25), rw = causal_attention(qw, kw, vw, 0.25);
    expect_rounded(r.y, rw.y, "attention y " + name);
    EXPECT_EQ(r.lse.dtype(), DType::f32);
    expect_rounded(r.lse, rw.lse, "attention lse " + name);
    auto [dy, dyw] = low_and_wide(random_tensor({2, 70, 16}, 15), low);
    const AttentionGrads d = causal_attention_backward(dy, q, k, v, r.y, r.lse, 0.25);
    const AttentionGrads dw = causal_attention_backward(dyw, qw, kw, vw, r.y.to(DType::f32), r.lse, 0.25);
    expect_rounded(d.dq, dw.dq, "attention dq " + name);
    expect_rounded(d.dk, dw.dk, "attention dk " + name);
    expect_rounded(d.dv, dw.dv, "attention dv " + name);
    EXPECT_THROW(causal_attention_backward(dy, q, k, v, r.y, r.lse.to(low), 0.25), Error);
    EXPECT_THROW(causal_attention(q, kw, v, 0.25), Error);
  }
}
