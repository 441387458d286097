// matmul / batched matmul against a double reference: transposes, views, broadcasting, bf16; the
// bias epilogue (matmul_bias) against the same reference plus the bias.
#include <gtest/gtest.h>

#include "kernels/reference.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/matmul.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

// C[b] = op(A[b]) op(B[b]) with batch broadcasting, in double.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, Shape& out) {
  const auto av = values(a), bv = values(b);
  const int ra = a.dim(), rb = b.dim();
  const std::int64_t m = ta ? a.size(-1) : a.size(-2), k = ta ? a.size(-2) : a.size(-1);
  const std::int64_t n = tb ? b.size(-2) : b.size(-1);
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "ref");
  out = batch;
  out.push_back(m);
  out.push_back(n);
  std::vector<double> r(static_cast<std::size_t>(shape_numel(out)));
  const std::int64_t nb = shape_numel(batch);
  auto base = [&](std::int64_t bi, const Shape& s, std::int64_t mat) {
    const auto idx = unravel(bi, batch);
    std::int64_t f = 0;
    const std::size_t lead = batch.size() - s.size();
    for (std::size_t d = 0; d < s.size(); ++d) f = f * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
    return f * mat;
  };
  for (std::int64_t bi = 0; bi < nb; ++bi) {
    const std::int64_t oa = base(bi, ba, a.size(-1) * a.size(-2)), ob = base(bi, bb, b.size(-1) * b.size(-2));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          const double x = ta ? av[oa + p * a.size(-1) + i] : av[oa + i * a.size(-1) + p];
          const double y = tb ? bv[ob + j * b.size(-1) + p] : bv[ob + p * b.size(-1) + j];
          s += x * y;
        }
        r[(bi * m + i) * n + j] = s;
      }
  }
  (void)ra;
  (void)rb;
  return r;
}

void check(const Tensor& a, const Tensor& b, bool ta, bool tb, double rtol = 1e-5, double atol = 1e-5) {
  Shape out;
  const auto r = ref_matmul(a, b, ta, tb, out);
  expect_close(kernels::matmul(a, b, ta, tb), r, out, rtol, atol);
}

}  // namespace

TEST(Matmul, ShapesAndTransposes) {
  std::uint64_t seed = 1;
  for (auto [m, k, n] : std::vector<std::array<std::int64_t, 3>>{{1, 1, 1}, {3, 5, 7}, {17, 1, 9}, {64, 33, 65}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, seed++);
        Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, seed++);
        check(a, b, ta, tb);
      }
}

TEST(Matmul, ViewsNeedNoCopyAndStillAgree) {
  Tensor a = random_tensor({9, 6}, 3).transpose(0, 1);         // [6, 9] transposed storage
  Tensor b = random_tensor({9, 20}, 4).slice(1, 2, 14);        // [9, 12], row stride 20
  check(a, b, false, false);
  Tensor c = random_tensor({9, 12}, 5).slice(1, 0, 12, 3);     // [9, 4], stride 3: needs a copy
  check(a, c, false, false);
}

TEST(Matmul, BatchedWithBroadcast) {
  check(random_tensor({4, 3, 5}, 1), random_tensor({4, 5, 2}, 2), false, false);
  check(random_tensor({2, 3, 3, 5}, 3), random_tensor({5, 4}, 4), false, false);       // b broadcast
  check(random_tensor({2, 1, 5, 3}, 5), random_tensor({1, 3, 4, 5}, 6), true, true);  // both broadcast
  check(random_tensor({3, 4, 6}, 7).transpose(1, 2), random_tensor({3, 4, 2}, 8), false, false);
  // One b for all entries: a's rows evenly spaced fold into one GEMM; spaced otherwise they do not.
  check(random_tensor({2, 3, 5, 7}, 9), random_tensor({4, 7}, 10), false, true);              // folded
  check(random_tensor({3, 6, 5}, 11).slice(1, 0, 4), random_tensor({5, 2}, 12), false, false);  // rows gapped
  check(random_tensor({3, 5, 4}, 13), random_tensor({5, 2}, 14), true, false);               // a transposed
}

TEST(Matmul, Bf16MatchesF32WithinBf16Precision) {
  Tensor a = random_tensor({2, 16, 32}, 11), b = random_tensor({2, 32, 8}, 12);
  Tensor ab = a.to(DType::bf16), bb = b.to(DType::bf16);
  // Reference from the bf16-rounded inputs in double; output is rounded to bf16 (8 bits of mantissa).
  Shape out;
  const auto r = ref_matmul(ab, bb, false, false, out);
  Tensor c = kernels::matmul(ab, bb);
  EXPECT_EQ(c.dtype(), DType::bf16);
  expect_close(c, r, out, 1e-2, 1e-2);
  Shape out_t;
  const auto rt = ref_matmul(ab, bb.transpose(1, 2).contiguous(), false, true, out_t);
  expect_close(kernels::matmul(ab, bb.transpose(1, 2).contiguous(), false, true), rt, out_t, 1e-2, 1e-2);
}

TEST(MatmulBias, EqualsTheProductPlusTheBiasOnEveryRow) {
  const auto check_bias = [](const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb) {
    Shape out;
    auto r = ref_matmul(a, b, ta, tb, out);
    const auto bv = values(bias);
    for (std::size_t i = 0; i < r.size(); ++i) r[i] += bv[i % bv.size()];
    expect_close(kernels::matmul_bias(a, b, bias, ta, tb), r, out, 1e-5, 1e-5);
  };
  check_bias(random_tensor({6, 4, 40}, 1), random_tensor({24, 40}, 2), random_tensor({24}, 3), false, true);   // a Linear layer
  check_bias(random_tensor({5, 1100}, 4), random_tensor({1100, 7}, 5), random_tensor({7}, 6), false, false);   // K over a block
  check_bias(random_tensor({2, 9, 3}, 7), random_tensor({2, 9, 5}, 8), random_tensor({5}, 9), true, false);     // batched, transposed
  check_bias(random_tensor({3, 8}, 10).to(DType::f64), random_tensor({8, 4}, 11).to(DType::f64),
             random_tensor({4}, 12).to(DType::f64), false, false);
  // No inner dimension: the bias alone.
  expect_close(kernels::matmul_bias(Tensor::empty({2, 0}), Tensor::empty({0, 3}), Tensor::from_vector<float>({1, 2, 3}, {3})),
               {1, 2, 3, 1, 2, 3}, {2, 3});
  EXPECT_THROW(kernels::matmul_bias(random_tensor({3, 4}, 1), random_tensor({4, 2}, 2), random_tensor({3}, 3)), Error);
  EXPECT_THROW(kernels::matmul_bias(random_tensor({3, 4}, 1), random_tensor({4, 2}, 2), random_tensor({1, 2}, 3)), Error);
  EXPECT_THROW(kernels::matmul_bias(random_tensor({3, 4}, 1), random_tensor({4, 2}, 2), Tensor::zeros({2}, DType::f64)), Error);
  EXPECT_THROW(kernels::matmul_bias(random_tensor({3, 4}, 1), random_tensor({4, 2}, 2), Tensor()), Error);
}

TEST(Matmul, ZeroInnerDimensionGivesZeros) {
  Tensor c = kernels::matmul(Tensor::empty({3, 0}), Tensor::empty({0, 4}));
  expect_close(c, std::vector<double>(12, 0.0), {3, 4});
}

TEST(Matmul, BadInput) {
  try {
    kernels::matmul(random_tensor({3, 4}, 1), random_tensor({5, 2}, 2));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::shape_mismatch);
    EXPECT_NE(m.find("matmul"), std::string::npos);
    EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[5, 2]"), std::string::npos) << m;
  }
  EXPECT_THROW(kernels::matmul(random_tensor({3}, 1), random_tensor({3, 2}, 2)), Error);
  EXPECT_THROW(kernels::matmul(random_tensor({2, 3}, 1), random_tensor({3, 2}, 2).to(DType::bf16)), Error);
  EXPECT_THROW(kernels::matmul(Tensor::zeros({2, 2}, DType::i32), Tensor::zeros({2, 2}, DType::i32)), Error);
  EXPECT_THROW(kernels::matmul(random_tensor({2, 2, 3}, 1), random_tensor({3, 3, 2}, 2)), Error);
}

// bf16 and f16 products written as f32 (mixed precision's GEMMs): exact products of the rounded
// operands accumulated in f32, on every operand layout the kernel reads without copies and the ones
// it copies.
TEST(Matmul, LowPrecisionOperandsWithAnF32Result) {
  for (DType low : {DType::bf16, DType::f16}) {
    const auto check = [low](const Tensor& a32, const Tensor& b32, bool ta, bool tb, const Tensor& bias = {}) {
      SCOPED_TRACE(shape_str(a32.shape()) + " @ " + shape_str(b32.shape()) + " " + dtype_name(low));
      const Tensor a = a32.to(low), b = b32.to(low);
      Shape out;
      auto r = ref_matmul(a, b, ta, tb, out);
      if (bias.defined()) {
        const auto bv = values(bias);
        for (std::size_t i = 0; i < r.size(); ++i) r[i] += bv[i % bv.size()];
      }
      const Tensor c = bias.defined() ? kernels::matmul_bias(a, b, bias, ta, tb, DType::f32)
                                      : kernels::matmul(a, b, ta, tb, DType::f32);
      EXPECT_EQ(c.dtype(), DType::f32);
      expect_close(c, r, out, 1e-5, 1e-5);
    };
    try {
      check(random_tensor({4, 6, 40}, 1), random_tensor({40, 24}, 2), false, false);          // a Linear layer: one product
      check(random_tensor({4, 6, 40}, 1), random_tensor({24, 40}, 2), false, true);           // weights stored transposed
      check(random_tensor({3, 5, 4}, 3), random_tensor({3, 5, 2}, 4), true, false);           // batched, a transposed
      check(random_tensor({2, 1, 3, 8}, 5), random_tensor({1, 3, 8, 2}, 6), false, false);    // both batches broadcast
      check(random_tensor({3, 6, 5}, 7).slice(1, 0, 4), random_tensor({5, 2}, 8), false, false);  // rows gapped
      check(random_tensor({2, 3, 9}, 9), random_tensor({9, 7}, 10), false, false, random_tensor({7}, 11));  // bias
      // Attention's heads: q and k permuted views of one low-precision qkv product, q k^T (k read
      // transposed, its batch not one stride: copied in its stored orientation) and p v.
      const Tensor qkv = random_tensor({2, 5, 24}, 12).to(low);
      const Tensor q = qkv.slice(2, 0, 12).reshape({2, 5, 3, 4}).permute({0, 2, 1, 3});
      const Tensor k = qkv.slice(2, 12, 24).reshape({2, 5, 3, 4}).permute({0, 2, 1, 3});
      Shape out;
      expect_close(kernels::matmul(q, k, false, true, DType::f32), ref_matmul(q, k, false, true, out), out, 1e-5, 1e-5);
      const Tensor p = random_tensor({2, 3, 5, 5}, 13).to(low);
      expect_close(kernels::matmul(p, k, false, false, DType::f32), ref_matmul(p, k, false, false, out), out, 1e-5, 1e-5);
    } catch (const Error& e) {
      // f16 products exist only where oneDNN has them (not in 2.6); the error says so and offers bf16.
      ASSERT_EQ(low, DType::f16) << e.what();
      EXPECT_FALSE(kernels::native_low_precision(DType::f16));
      EXPECT_EQ(e.kind(), ErrorKind::unsupported);
      EXPECT_NE(std::string(e.what()).find("use bf16"), std::string::npos) << e.what();
    }
  }
  // The same dtype written as it is, and nothing else but f32 from a low-precision product.
  EXPECT_EQ(kernels::matmul(random_tensor({2, 3}, 1).to(DType::bf16), random_tensor({3, 2}, 2).to(DType::bf16), false,
                            false, DType::bf16).dtype(),
            DType::bf16);
  EXPECT_THROW(kernels::matmul(random_tensor({2, 3}, 1), random_tensor({3, 2}, 2), false, false, DType::bf16), Error);
  EXPECT_THROW(kernels::matmul(random_tensor({2, 3}, 1).to(DType::bf16), random_tensor({3, 2}, 2).to(DType::bf16),
                               false, false, DType::f64), Error);
  // A bias must be in the result's dtype.
  EXPECT_THROW(kernels::matmul_bias(random_tensor({2, 3}, 1).to(DType::bf16), random_tensor({3, 2}, 2).to(DType::bf16),
                                    random_tensor({2}, 3).to(DType::bf16), false, false, DType::f32), Error);
}
