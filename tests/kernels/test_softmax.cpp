// Softmax / log-softmax forward and backward against double references and finite differences; the
// causal softmax against the chain it replaces.
#include <gtest/gtest.h>

#include <cmath>

#include <cstring>
#include <limits>

#include "kernels/reference.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/select.hpp"
#include "troupe/kernels/softmax.hpp"

using namespace troupe;

namespace {
std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& s, int axis, bool log) {
  std::int64_t outer = 1, n = s[axis], inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (std::size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  std::vector<double> y(x.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < inner; ++j) {
      double m = -1e300, sum = 0;
      for (std::int64_t k = 0; k < n; ++k) m = std::max(m, x[(o * n + k) * inner + j]);
      for (std::int64_t k = 0; k < n; ++k) sum += std::exp(x[(o * n + k) * inner + j] - m);
      for (std::int64_t k = 0; k < n; ++k) {
        const double v = x[(o * n + k) * inner + j] - m;
        y[(o * n + k) * inner + j] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return y;
}
}  // namespace

TEST(Softmax, ForwardShapesAndAxes) {
  for (Shape s : {Shape{7}, Shape{3, 5}, Shape{2, 1, 9}, Shape{4, 3, 2}}) {
    for (int ax = 0; ax < static_cast<int>(s.size()); ++ax) {
      Tensor x = test::random_tensor(s, 1 + ax, -5, 5);
      auto xv = test::values(x);
      test::expect_close(kernels::softmax(x, ax), ref_softmax(xv, s, ax, false), s);
      test::expect_close(kernels::log_softmax(x, ax - static_cast<int>(s.size())), ref_softmax(xv, s, ax, true), s);
    }
  }
}

TEST(Softmax, NonContiguousAndLargeValues) {
  Tensor x = test::random_tensor({5, 6}, 3, -50, 50).transpose(0, 1);
  Shape s{6, 5};
  auto xv = test::values(x);
  test::expect_close(kernels::softmax(x), ref_softmax(xv, s, 1, false), s);
  Tensor big = Tensor::from_vector<float>({1000.f, 1001.f, 999.f}, {3});
  test::expect_close(kernels::softmax(big), ref_softmax({1000, 1001, 999}, {3}, 0, false), {3});
}

TEST(Softmax, BackwardAnalyticAndFiniteDifference) {
  Shape s{3, 4};
  Tensor x = test::random_tensor(s, 7);
  Tensor g = test::random_tensor(s, 8);
  auto xv = test::values(x), gv = test::values(g);
  for (bool log : {false, true}) {
    Tensor y = log ? kernels::log_softmax(x) : kernels::softmax(x);
    Tensor dx = log ? kernels::log_softmax_backward(g, y) : kernels::softmax_backward(g, y);
    // Finite differences of L = sum(g * f(x)) in double.
    std::vector<double> fd(xv.size());
    const double h = 1e-6;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      auto xp = xv, xm = xv;
      xp[i] += h;
      xm[i] -= h;
      auto yp = ref_softmax(xp, s, 1, log), ym = ref_softmax(xm, s, 1, log);
      double l = 0;
      for (std::size_t j = 0; j < xv.size(); ++j) l += gv[j] * (yp[j] - ym[j]);
      fd[i] = l / (2 * h);
    }
    test::expect_close(dx, fd, s, 1e-4, 1e-5);
  }
}

TEST(Softmax, BadInput) {
  Tensor a = test::random_tensor({2, 3}, 1), b = test::random_tensor({3, 2}, 2);
  try {
    kernels::softmax_backward(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax_backward"), std::string::npos);
  }
  EXPECT_THROW(kernels::softmax(a, 5), Error);
  EXPECT_THROW(kernels::log_softmax(Tensor::zeros({3}, DType::i32)), Error);
}

namespace {
// What level 3's causal softmax replaces: the chain attention writes around its score product, in
// the dtypes mixed precision's O2 runs it (scale in x's dtype, the mask and softmax in f32, the
// probabilities back in x's dtype), and its gradient nodes (in f32 on the widened y, then down).
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}
Tensor chain_forward(const Tensor& x, double scale) {
  const Tensor s = kernels::mul(x, scale).to(DType::f32);
  return kernels::softmax(kernels::causal_mask(s, -std::numeric_limits<double>::infinity()), -1).to(x.dtype());
}
Tensor chain_backward(const Tensor& dy, const Tensor& y, double scale) {
  const Tensor d = kernels::softmax_backward(dy.to(DType::f32), y.to(DType::f32), -1);
  return kernels::mul(kernels::causal_mask(d, 0.0).to(y.dtype()), scale);
}
}  // namespace

TEST(CausalSoftmax, GivesTheChainsBitsWithAPowerOfTwoScale) {
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    for (std::int64_t t : {17, 40}) {  // rows with and without a whole number of 8-lane blocks
      SCOPED_TRACE(std::string(dtype_name(dt)) + ", T = " + std::to_string(t));
      const Tensor x = test::random_tensor({2, 3, t, t}, 3, -6, 6).to(dt), dy = test::random_tensor({2, 3, t, t}, 4).to(dt);
      const Tensor y = kernels::causal_softmax(x, 0.125);
      const Tensor want = dt == DType::f64 ? kernels::softmax(kernels::causal_mask(kernels::mul(x, 0.125), -INFINITY), -1)
                                           : chain_forward(x, 0.125);
      if (dt == DType::f64)
        test::expect_close(y, test::values(want), y.shape(), 1e-14);
      else
        EXPECT_TRUE(same_bits(y, want));
      // Query i keeps keys j <= i: row 0 is [1, 0, ...], and every row sums to 1.
      EXPECT_EQ(y.to(DType::f64).data<double>()[0], 1.0);
      EXPECT_EQ(y.to(DType::f64).data<double>()[1], 0.0);
      const Tensor dx = kernels::causal_softmax_backward(dy, y, 0.125);
      if (dt == DType::f64)
        test::expect_close(dx, test::values(kernels::mul(kernels::causal_mask(kernels::softmax_backward(dy, y, -1), 0.0), 0.125)),
                           dx.shape(), 1e-14);
      else
        EXPECT_TRUE(same_bits(dx, chain_backward(dy, y, 0.125)));
    }
  }
}

TEST(CausalSoftmax, OtherScalesAreWithinRoundingAndMaskedScoresAreNeverRead) {
  const double scale = 1.0 / std::sqrt(48.0);
  const Tensor x = test::random_tensor({3, 33, 33}, 5, -4, 4);
  test::expect_close(kernels::causal_softmax(x, scale),
                     test::values(kernels::softmax(kernels::causal_mask(kernels::mul(x, scale), -INFINITY), -1)), x.shape(),
                     1e-6);
  // NaN and Inf above the diagonal (what a score product may leave there) change nothing.
  Tensor dirty = x.clone();
  float* d = dirty.data<float>();
  for (std::int64_t m = 0; m < 3; ++m)
    for (std::int64_t i = 0; i < 33; ++i)
      for (std::int64_t j = i + 1; j < 33; ++j) d[(m * 33 + i) * 33 + j] = (i + j) % 2 ? NAN : INFINITY;
  EXPECT_TRUE(same_bits(kernels::causal_softmax(dirty, scale), kernels::causal_softmax(x, scale)));
}

TEST(CausalSoftmax, BadInputIsRefused) {
  EXPECT_THROW(kernels::causal_softmax(test::random_tensor({4, 5}, 1), 1.0), Error);  // not square
  EXPECT_THROW(kernels::causal_softmax(test::random_tensor({4}, 1), 1.0), Error);     // not a matrix
  EXPECT_THROW(kernels::causal_softmax(Tensor::zeros({3, 3}, DType::i64), 1.0), Error);
  const Tensor y = kernels::causal_softmax(test::random_tensor({2, 4, 4}, 2), 1.0);
  EXPECT_THROW(kernels::causal_softmax_backward(test::random_tensor({2, 4, 3}, 3), y, 1.0), Error);
  EXPECT_THROW(kernels::causal_softmax_backward(test::random_tensor({2, 4, 4}, 3).to(DType::f64), y, 1.0), Error);
}
