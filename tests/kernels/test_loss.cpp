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

// Megatron's vocab-parallel cross-entropy on 3 devices holding 2 of the 6 classes each: with the
// rows' maximum over all of them, their parts summed give the loss, and each device's gradient is
// its columns of the whole gradient (in f64 and f32).
TEST(CrossEntropy, VocabParallelPartsGiveTheWholeLossAndGradient) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    const int n = 4, c = 6, devices = 3, held = c / devices;
    const Tensor x = test::random_tensor({n, c}, 3, -4, 4).to(dtype);
    const Tensor t = Tensor::from_vector<std::int64_t>({5, 0, 3, 2}, {n});
    std::vector<double> maxima(n, -1e300);
    const std::vector<double> xv = test::values(x);
    for (std::size_t i = 0; i < xv.size(); ++i) maxima[i / c] = std::max(maxima[i / c], xv[i]);
    const Tensor max = Tensor::from_vector(maxima, {n}).to(dtype);
    Tensor parts = Tensor::zeros({n, 2}, DType::f64);
    std::vector<Tensor> slices;
    for (int d = 0; d < devices; ++d) {
      slices.push_back(x.slice(1, d * held, (d + 1) * held));
      const std::vector<double> p = test::values(kernels::cross_entropy_parts(slices.back(), t, max, d * held, c));
      for (int i = 0; i < 2 * n; ++i) parts.data<double>()[i] += p[static_cast<std::size_t>(i)];
    }
    const Tensor loss = kernels::cross_entropy_from_parts(parts, dtype);
    test::expect_close(loss, test::values(kernels::cross_entropy(x, t)), {}, 1e-6, 1e-6);
    const Tensor grad = Tensor::scalar(2.0).to(dtype);
    const std::vector<double> whole = test::values(kernels::cross_entropy_backward(grad, x, t));
    for (int d = 0; d < devices; ++d) {
      std::vector<double> mine;
      for (int r = 0; r < n; ++r)
        for (int k = d * held; k < (d + 1) * held; ++k) mine.push_back(whole[static_cast<std::size_t>(r * c + k)]);
      test::expect_close(kernels::cross_entropy_parts_backward(grad, slices[static_cast<std::size_t>(d)], t, max, parts, d * held, c),
                         mine, {n, held}, 1e-6, 1e-6);
    }
  }
}

// The parts check the targets against all the classes, the rows' maximum and the slice.
TEST(CrossEntropy, VocabParallelPartsRefuseBadInput) {
  const Tensor x = test::random_tensor({2, 3}, 4), max = Tensor::zeros({2});
  try {
    kernels::cross_entropy_parts(x, Tensor::from_vector<std::int64_t>({0, 6}, {2}), max, 3, 6);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_range);
    EXPECT_NE(std::string(e.what()).find("target 6 at position 1 is outside [0, C) with C = 6"), std::string::npos) << e.what();
  }
  const Tensor t = Tensor::from_vector<std::int64_t>({0, 5}, {2});
  EXPECT_THROW(kernels::cross_entropy_parts(x, t, Tensor::zeros({3}), 0, 6), Error);       // a maximum per row
  EXPECT_THROW(kernels::cross_entropy_parts(x, t, max, 4, 6), Error);                      // columns past the classes
  EXPECT_THROW(kernels::cross_entropy_from_parts(Tensor::zeros({2, 2}), DType::f32), Error);  // parts are f64
  const Tensor bad_parts = Tensor::zeros({2, 3}, DType::f64);  // two per row
  EXPECT_THROW(kernels::cross_entropy_parts_backward(Tensor::scalar(1.0).to(DType::f32), x, t, max, bad_parts, 0, 6), Error);
}
