// Softmax / log-softmax forward and backward against double references and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference.hpp"
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
