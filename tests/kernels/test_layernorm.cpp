// layernorm forward/backward against a double reference and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference.hpp"
#include "troupe/kernels/layernorm.hpp"

using namespace troupe;

namespace {
std::vector<double> ref_ln(const std::vector<double>& x, const std::vector<double>& g, const std::vector<double>& b,
                           std::int64_t d, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double m = 0, v = 0;
    for (std::int64_t i = 0; i < d; ++i) m += x[r * d + i];
    m /= d;
    for (std::int64_t i = 0; i < d; ++i) v += (x[r * d + i] - m) * (x[r * d + i] - m);
    v /= d;
    for (std::int64_t i = 0; i < d; ++i) y[r * d + i] = (x[r * d + i] - m) / std::sqrt(v + eps) * g[i] + b[i];
  }
  return y;
}
}  // namespace

TEST(LayerNorm, ForwardNonContiguous) {
  Tensor x = test::random_tensor({7, 3}, 1).transpose(0, 1);  // [3, 7]
  Tensor g = test::random_tensor({7}, 2), b = test::random_tensor({7}, 3);
  auto out = kernels::layernorm(x, g, b);
  test::expect_close(out.y, ref_ln(test::values(x), test::values(g), test::values(b), 7, 1e-5), {3, 7}, 1e-4, 1e-5);
  EXPECT_EQ(out.mean.shape(), Shape{3});
  EXPECT_EQ(out.rstd.shape(), Shape{3});
}

TEST(LayerNorm, BackwardFiniteDifference) {
  const std::int64_t d = 5;
  Shape s{2, 1, d};
  Tensor x = test::random_tensor(s, 4), g = test::random_tensor({d}, 5), b = test::random_tensor({d}, 6);
  Tensor dy = test::random_tensor(s, 7);
  auto out = kernels::layernorm(x, g, b);
  auto gr = kernels::layernorm_backward(dy, x, g, out.mean, out.rstd);
  auto xv = test::values(x), gv = test::values(g), bv = test::values(b), dyv = test::values(dy);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& gg, const std::vector<double>& bb) {
    auto y = ref_ln(xx, gg, bb, d, 1e-5);
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * dyv[i];
    return l;
  };
  const double h = 1e-6;
  auto fd = [&](std::vector<double>& v, int which) {
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double o = v[i];
      v[i] = o + h;
      const double lp = loss(xv, gv, bv);
      v[i] = o - h;
      const double lm = loss(xv, gv, bv);
      v[i] = o;
      r[i] = (lp - lm) / (2 * h);
    }
    (void)which;
    return r;
  };
  test::expect_close(gr.dx, fd(xv, 0), s, 1e-3, 1e-4);
  test::expect_close(gr.dgamma, fd(gv, 1), {d}, 1e-3, 1e-4);
  test::expect_close(gr.dbeta, fd(bv, 2), {d}, 1e-3, 1e-4);
}

TEST(LayerNorm, BadInput) {
  Tensor x = test::random_tensor({2, 4}, 1), g = test::random_tensor({3}, 2);
  try {
    kernels::layernorm(x, g, g);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layernorm"), std::string::npos);
  }
  EXPECT_THROW(kernels::layernorm(Tensor::zeros({2, 4}, DType::i32), g, g), Error);
}
