#include "kernels/reference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "troupe/kernels/rng.hpp"

namespace troupe::test {

Tensor random_tensor(const Shape& shape, std::uint64_t seed, double low, double high) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  gen.uniform_(t, low, high);
  return t;
}

std::vector<double> values(const Tensor& t) {
  Tensor dense = t.to(Device::cpu()).contiguous();
  std::vector<double> out(static_cast<std::size_t>(dense.numel()));
  visit_dtype(dense.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(dense.raw_data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_double(p[i]);
  });
  return out;
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, const Shape& shape, double rtol,
                  double atol) {
  ASSERT_EQ(actual.shape(), shape) << "shape " << shape_str(actual.shape()) << " vs expected " << shape_str(shape);
  const auto got = values(actual);
  ASSERT_EQ(got.size(), expected.size());
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::abs(expected[i]);
    const bool ok = std::abs(got[i] - expected[i]) <= tol || (std::isnan(got[i]) && std::isnan(expected[i])) ||
                    (std::isinf(got[i]) && got[i] == expected[i]);
    if (!ok && reported++ < 5) ADD_FAILURE() << "element " << i << ": got " << got[i] << ", expected " << expected[i];
  }
}

std::vector<std::int64_t> unravel(std::int64_t i, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

double scaled_max_error(const Tensor& actual, const Tensor& expected) {
  const auto a = values(actual), e = values(expected);
  EXPECT_EQ(a.size(), e.size()) << "scaled_max_error: sizes differ";
  double diff = 0, scale = 1e-30;
  for (std::size_t i = 0; i < e.size() && i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - e[i]));
    scale = std::max(scale, std::abs(e[i]));
  }
  return diff / scale;
}

}  // namespace troupe::test
