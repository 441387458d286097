// sum / mean / max / sum_to_shape against double references.
#include <gtest/gtest.h>

#include "kernels/reference.hpp"
#include "troupe/kernels/reduce.hpp"

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
  test::expect_close(ops::sum(x, {0, -2}), sum, {1, 2});
  test::expect_close(ops::max(x, {0, 2}, true), mx, {1, 1, 1, 2});
  std::vector<double> mean{sum[0] / 15, sum[1] / 15};
  test::expect_close(ops::mean(x, {2, 0}), mean, {1, 2});
  test::expect_close(ops::sum(x, {}), {sum[0] + sum[1]}, {}, 1e-5, 1e-5);
}

TEST(Reduce, NonContiguousAndSumToShape) {
  Tensor x = test::random_tensor({4, 7}, 5).transpose(0, 1).slice(0, 1, 7, 2);  // [3, 4]
  auto xv = test::values(x);
  std::vector<double> r(4, 0);
  for (int i = 0; i < 12; ++i) r[i % 4] += xv[i];
  test::expect_close(ops::sum(x, {0}), r, {4});
  test::expect_close(ops::sum_to_shape(x, {1, 4}), r, {1, 4});
  test::expect_close(ops::sum_to_shape(x.unsqueeze(0), {4}), r, {4});
}

TEST(Reduce, BadInput) {
  Tensor x = test::random_tensor({2, 3}, 1);
  try {
    ops::sum_to_shape(x, {2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum_to_shape"), std::string::npos);
  }
  EXPECT_THROW(ops::sum(x, {2}), Error);
  EXPECT_THROW(ops::max(x, {0, 0}), Error);
  EXPECT_THROW(ops::mean(Tensor::zeros({2}, DType::i64), {}), Error);
}
