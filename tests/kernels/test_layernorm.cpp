// layernorm forward/backward against a double reference and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/reference.hpp"
#include "troupe/kernels/error.hpp"
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

// y written as bf16 or f16 from f32 rows: exactly the f32 y rounded, the statistics and the sum
// unchanged; only f32 rows may do it.
TEST(LayerNorm, WritesYInALowerDtypeAsACastAfterIt) {
  const Tensor x = test::random_tensor({37, 48}, 3, -3, 3), r = test::random_tensor({37, 48}, 4);
  const Tensor g = test::random_tensor({48}, 5, 0.5, 1.5), b = test::random_tensor({48}, 6);
  const auto same = [](const Tensor& p, const Tensor& q) {
    return p.dtype() == q.dtype() && p.shape() == q.shape() && std::memcmp(p.raw_data(), q.raw_data(), p.nbytes()) == 0;
  };
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    const auto plain = kernels::layernorm(x, g, b), lowered = kernels::layernorm(x, g, b, 1e-5, low);
    EXPECT_TRUE(same(lowered.y, plain.y.to(low)));
    EXPECT_TRUE(same(lowered.mean, plain.mean));
    EXPECT_TRUE(same(lowered.rstd, plain.rstd));
    const auto added = kernels::add_layernorm(x, r, g, b), added_low = kernels::add_layernorm(x, r, g, b, 1e-5, low);
    EXPECT_TRUE(same(added_low.y, added.y.to(low)));
    EXPECT_TRUE(same(added_low.sum, added.sum));
  }
  EXPECT_TRUE(same(kernels::layernorm(x, g, b, 1e-5, DType::f32).y, kernels::layernorm(x, g, b).y));
  EXPECT_THROW(kernels::layernorm(x.to(DType::f64), g.to(DType::f64), b.to(DType::f64), 1e-5, DType::bf16), Error);
  EXPECT_THROW(kernels::layernorm(x.to(DType::bf16), g.to(DType::bf16), b.to(DType::bf16), 1e-5, DType::f16), Error);
  EXPECT_THROW(kernels::layernorm(x, g, b, 1e-5, DType::i64), Error);
}
