// cross_entropy forward/backward against double reference and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference.hpp"
#include "troupe/kernels/loss.hpp"

using namespace troupe;

namespace {
double ref_ce(const std::vector<double>& x, const std::vector<int>& t, int n, int c) {
  double tot = 0;
  for (int r = 0; r < n; ++r) {
    double m = -1e300, s = 0;
    for (int k = 0; k < c; ++k) m = std::max(m, x[r * c + k]);
    for (int k = 0; k < c; ++k) s += std::exp(x[r * c + k] - m);
    tot += m + std::log(s) - x[r * c + t[r]];
  }
  return tot / n;
}
}  // namespace

TEST(CrossEntropy, ForwardBackwardFD) {
  const int n = 3, c = 4;
  Tensor x = test::random_tensor({c, n}, 1, -3, 3).transpose(0, 1);
  std::vector<int> tv{2, 0, 3};
  Tensor t = Tensor::from_vector<std::int32_t>({2, 0, 3}, {3});
  auto xv = test::values(x);
  test::expect_close(kernels::cross_entropy(x, t), {ref_ce(xv, tv, n, c)}, {}, 1e-5, 1e-5);
  Tensor dx = kernels::cross_entropy_backward(Tensor::scalar(2.0), x, t);
  std::vector<double> fd(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    auto p = xv, m = xv;
    p[i] += 1e-6;
    m[i] -= 1e-6;
    fd[i] = 2.0 * (ref_ce(p, tv, n, c) - ref_ce(m, tv, n, c)) / 2e-6;
  }
  test::expect_close(dx, fd, {n, c}, 1e-4, 1e-5);
}

TEST(CrossEntropy, BadInput) {
  Tensor x = test::random_tensor({2, 3}, 1);
  try {
    kernels::cross_entropy(x, Tensor::from_vector<std::int64_t>({0, 3}, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_range);
    EXPECT_NE(std::string(e.what()).find("cross_entropy"), std::string::npos);
  }
  EXPECT_THROW(kernels::cross_entropy(x, Tensor::zeros({3}, DType::i64)), Error);
  EXPECT_THROW(kernels::cross_entropy(x, test::random_tensor({2}, 2)), Error);
}
