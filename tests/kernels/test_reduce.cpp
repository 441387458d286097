// sum / mean / max / sum_to_shape against double references.
#include <gtest/gtest.h>

#include "kernels/reference.hpp"
#include "troupe/kernels/reduce.hpp"

#include <cmath>
#include <limits>

using namespace troupe;

TEST(Reduce, SumMeanMaxAxes) {
  Shape s{3, 1, 5, 2};
  Tensor x = test::random_tensor(s, 11);
  auto xv = test::values(x);
  // reduce axes {0, 2}: out [1, 2]
  std::vector<double> sum(2, 0), mx(2, -1e9);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    auto idx = test::unravel(i, s);
    sum[idx[3]] += xv[i];
    mx[idx[3]] = std::max(mx[idx[3]], xv[i]);
  }
  test::expect_close(kernels::sum(x, {0, -2}), sum, {1, 2});
  test::expect_close(kernels::max(x, {0, 2}, true), mx, {1, 1, 1, 2});
  std::vector<double> mean{sum[0] / 15, sum[1] / 15};
  test::expect_close(kernels::mean(x, {2, 0}), mean, {1, 2});
  test::expect_close(kernels::sum(x, {}), {sum[0] + sum[1]}, {}, 1e-5, 1e-5);
}

TEST(Reduce, NonContiguousAndSumToShape) {
  Tensor x = test::random_tensor({4, 7}, 5).transpose(0, 1).slice(0, 1, 7, 2);  // [3, 4]
  auto xv = test::values(x);
  std::vector<double> r(4, 0);
  for (int i = 0; i < 12; ++i) r[i % 4] += xv[i];
  test::expect_close(kernels::sum(x, {0}), r, {4});
  test::expect_close(kernels::sum_to_shape(x, {1, 4}), r, {1, 4});
  test::expect_close(kernels::sum_to_shape(x.unsqueeze(0), {4}), r, {4});
}

TEST(Reduce, BadInput) {
  Tensor x = test::random_tensor({2, 3}, 1);
  try {
    kernels::sum_to_shape(x, {2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum_to_shape"), std::string::npos);
  }
  EXPECT_THROW(kernels::sum(x, {2}), Error);
  EXPECT_THROW(kernels::max(x, {0, 0}), Error);
  EXPECT_THROW(kernels::mean(Tensor::zeros({2}, DType::i64), {}), Error);
}

// Every layout path: one run in the middle ([outer, extent, inner]), trailing and leading runs, and
// two runs (NCHW bias gradients: axes 0, 2, 3), for sum, mean and max, against a direct loop; max
// propagates NaN from any position.
TEST(Reduce, EveryAxisPatternMatchesADirectLoop) {
  const Shape s{3, 4, 5, 6};
  const Tensor x = test::random_tensor(s, 21);
  const auto xv = test::values(x);
  for (const std::vector<std::int64_t>& axes : std::vector<std::vector<std::int64_t>>{
           {1, 2}, {2, 3}, {0, 1}, {0, 2, 3}, {0, 3}, {1, 3}, {3}, {0}}) {
    Shape out;
    std::vector<bool> red(4, false);
    for (auto a : axes) red[static_cast<std::size_t>(a)] = true;
    for (int d = 0; d < 4; ++d) out.push_back(red[d] ? 1 : s[d]);
    const std::int64_t n = shape_numel(out);
    std::vector<double> sum(n, 0), mx(n, -1e30);
    double extent = 1;
    for (auto a : axes) extent *= static_cast<double>(s[static_cast<std::size_t>(a)]);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      auto idx = test::unravel(i, s);
      std::int64_t o = 0;
      for (int d = 0; d < 4; ++d) o = o * out[d] + (red[d] ? 0 : idx[d]);
      sum[o] += xv[i];
      mx[o] = std::max(mx[o], xv[i]);
    }
    std::vector<double> mean(sum);
    for (double& m : mean) m /= extent;
    SCOPED_TRACE(::testing::PrintToString(axes));
    test::expect_close(kernels::sum(x, axes, true), sum, out);
    test::expect_close(kernels::mean(x, axes, true), mean, out);
    test::expect_close(kernels::max(x, axes, true), mx, out);
  }
  Tensor with_nan = x.clone();
  with_nan.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();  // [0, 0, 1, 1]
  const auto m = kernels::max(with_nan, {0, 2, 3}).to_vector<float>();
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_FALSE(std::isnan(m[1]));
}

// bf16 and f16 reductions read the stored values and reduce in double, rounding once: exactly the
// f64 reduction of the widened input, rounded (a bf16 bias gradient under mixed precision).
TEST(Reduce, LowPrecisionReducesInDoubleAndRoundsOnce) {
  for (DType low : {DType::bf16, DType::f16}) {
    const Tensor x = test::random_tensor({6, 5, 7}, 3).to(low);
    const Tensor wide = x.to(DType::f64);
    const auto same = [&](const Tensor& got, const Tensor& exact, const char* what) {
      SCOPED_TRACE(what);
      const auto g = test::values(got.to(DType::f64)), e = test::values(exact.to(low).to(DType::f64));
      ASSERT_EQ(g.size(), e.size());
      for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], e[i]) << dtype_name(low) << " " << i;
    };
    same(kernels::sum(x, {0, 2}), kernels::sum(wide, {0, 2}), "sum over 0, 2");
    same(kernels::mean(x, {1}), kernels::mean(wide, {1}), "mean over 1");
    same(kernels::max(x, {0}), kernels::max(wide, {0}), "max over 0");
    same(kernels::sum(x, {}), kernels::sum(wide, {}), "sum");
    same(kernels::sum_to_shape(x, {5, 1}), kernels::sum_to_shape(wide, {5, 1}), "sum_to_shape");
    EXPECT_EQ(kernels::sum(x, {0}).dtype(), low);
  }
}
