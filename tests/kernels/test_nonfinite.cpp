// NaN and infinities through every activation, reduction, softmax, layernorm and loss kernel: the
// results must be what IEEE arithmetic gives for the op's formula (computed here in double with
// libm), so a diverging run reports a NaN loss instead of tripping undefined behaviour inside a
// vectorised kernel. Vectorised loops are exercised by rows longer than one vector.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/reference.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/layernorm.hpp"
#include "troupe/kernels/loss.hpp"
#include "troupe/kernels/reduce.hpp"
#include "troupe/kernels/softmax.hpp"

using namespace troupe;
using namespace troupe::test;
using kernels::UnaryOp;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Inputs at and beyond every edge of the fast exp: NaN, ±Inf, overflow and underflow of e^x, the
// denormal range, and ordinary values, repeated past one vector so both loop paths see them.
std::vector<double> edge_inputs() {
  const std::vector<double> edges = {kNan, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 20.0, -20.0, 87.0, 88.5, 88.8, 89.5,
                                     100.0, -86.0, -87.5, -90.0, -100.0, -103.0, -104.5, -200.0, 1e30, -1e30};
  std::vector<double> out;
  for (int r = 0; r < 3; ++r) out.insert(out.end(), edges.begin(), edges.end());
  return out;
}

Tensor tensor_of(const std::vector<double>& v, DType dtype, const Shape& shape) {
  return Tensor::from_vector<double>(v, shape).to(dtype);
}

// Same class as IEEE: NaN for NaN, the same infinity, the same zero-or-not, else close.
void expect_ieee(double actual, double expected, double rtol, const std::string& where) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << where << ": expected NaN, got " << actual;
  } else if (std::isinf(expected)) {
    EXPECT_EQ(actual, expected) << where;
  } else {
    EXPECT_TRUE(std::isfinite(actual)) << where << ": expected " << expected << ", got " << actual;
    // Denormal results carry fewer significant bits; an absolute floor of a few denormal steps.
    EXPECT_NEAR(actual, expected, rtol * std::fabs(expected) + 1e-44) << where;
  }
}

void expect_all_ieee(const Tensor& actual, const std::vector<double>& expected, double rtol, const std::string& what) {
  const std::vector<double> got = values(actual);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) expect_ieee(got[i], expected[i], rtol, what + " [" + std::to_string(i) + "]");
}

// The op's formula evaluated in the kernel's own type T with libm, so over- and underflow happen where
// the kernel's would (silu at x = -90 is -0 in float, as e^90 is already infinite there).
template <typename T>
double ref_forward(UnaryOp op, double xd) {
  const T x = static_cast<T>(xd);
  switch (op) {
    case UnaryOp::relu: return std::isnan(x) ? x : (x < 0 ? 0 : x);
    case UnaryOp::gelu: {
      const T u = std::sqrt(T(2) / T(M_PI)) * (x + T(0.044715) * x * x * x);
      return x / (1 + std::exp(-2 * u));  // the kernel's form of 0.5 x (1 + tanh u); both give NaN at -Inf
    }
    case UnaryOp::silu: return x / (1 + std::exp(-x));
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::rsqrt: return 1 / std::sqrt(x);
    case UnaryOp::neg: return -x;
  }
  return 0;
}

const UnaryOp kAllUnary[] = {UnaryOp::relu, UnaryOp::gelu, UnaryOp::silu, UnaryOp::exp, UnaryOp::log,
                             UnaryOp::tanh, UnaryOp::sqrt, UnaryOp::rsqrt, UnaryOp::neg};

}  // namespace

TEST(NonFinite, ActivationsFollowIeeeForNanInfAndOverflow) {
  const std::vector<double> x = edge_inputs();
  for (DType dtype : {DType::f32, DType::f64})
    for (UnaryOp op : kAllUnary) {
      std::vector<double> expected;
      for (double v : x) expected.push_back(dtype == DType::f32 ? ref_forward<float>(op, v) : ref_forward<double>(op, v));
      const Tensor y = kernels::unary(op, tensor_of(x, dtype, {static_cast<std::int64_t>(x.size())}));
      expect_all_ieee(y, expected, dtype == DType::f32 ? 2e-6 : 1e-12,
                      std::string(kernels::to_string(op)) + " " + dtype_name(dtype));
    }
}

TEST(NonFinite, ActivationGradientsPropagateNan) {
  const std::vector<double> x = {kNan, 1.0, -1.0, kNan, 0.5, 2.0, -3.0, kNan, 4.0, kNan};
  for (UnaryOp op : kAllUnary) {
    if (op == UnaryOp::relu || op == UnaryOp::neg) continue;  // their gradients do not read x's value
    const Tensor dx = kernels::unary_backward(op, Tensor::full({10}, 1.0), tensor_of(x, DType::f32, {10}));
    const std::vector<double> d = values(dx);
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(d[i])) << kernels::to_string(op) << "_backward at " << i;
      }
    }
  }
  // A NaN upstream gradient reaches every input, relu's included.
  const Tensor g = tensor_of({kNan, kNan}, DType::f32, {2});
  for (double v : values(kernels::relu_backward(g, tensor_of({1.0, 2.0}, DType::f32, {2})))) EXPECT_TRUE(std::isnan(v));
}

TEST(NonFinite, ReductionsPropagateNanAndInf) {
  for (DType dtype : {DType::f32, DType::f64}) {
    // 37 values: past the eight partial sums of the dense path and its tail.
    for (std::int64_t at : {0, 5, 20, 36}) {
      std::vector<double> v(37, 1.0);
      v[static_cast<std::size_t>(at)] = kNan;
      const Tensor t = tensor_of(v, dtype, {37});
      EXPECT_TRUE(std::isnan(values(kernels::sum(t, {}))[0])) << "sum, NaN at " << at;
      EXPECT_TRUE(std::isnan(values(kernels::mean(t, {}))[0])) << "mean, NaN at " << at;
      EXPECT_TRUE(std::isnan(values(kernels::max(t, {}))[0])) << "max, NaN at " << at;
      // Columns too (inner > 1): the NaN lands in exactly one column.
      const std::vector<double> cols = values(kernels::max(tensor_of(v, dtype, {37, 1}).expand({37, 3}).contiguous(), {0}));
      for (double c : cols) EXPECT_TRUE(std::isnan(c)) << "column max, NaN at " << at;
    }
    std::vector<double> v(20, 1.0);
    v[3] = kInf;
    EXPECT_EQ(values(kernels::sum(tensor_of(v, dtype, {20}), {}))[0], kInf);
    EXPECT_EQ(values(kernels::max(tensor_of(v, dtype, {20}), {}))[0], kInf);
    v[9] = -kInf;
    EXPECT_TRUE(std::isnan(values(kernels::sum(tensor_of(v, dtype, {20}), {}))[0])) << "inf + -inf";
    EXPECT_EQ(values(kernels::max(tensor_of({-kInf, -kInf}, dtype, {2}), {}))[0], -kInf);
  }
}

TEST(NonFinite, SoftmaxRowsFollowIeee) {
  for (DType dtype : {DType::f32, DType::f64})
    for (bool log : {false, true}) {
      const auto run = [&](const std::vector<double>& row) {
        const Tensor x = tensor_of(row, dtype, {1, static_cast<std::int64_t>(row.size())});
        return values(log ? kernels::log_softmax(x) : kernels::softmax(x));
      };
      const std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(dtype);
      // A NaN or +Inf score makes the whole row NaN (e^(x - max) meets NaN or inf - inf).
      for (double bad : {kNan, kInf})
        for (std::size_t at : {std::size_t{11}, std::size_t{17}}) {  // in the vector lanes, in the tail
          std::vector<double> row(19, 0.5);
          row[at] = bad;
          for (double y : run(row)) EXPECT_TRUE(std::isnan(y)) << what << " with " << bad << " at " << at;
        }
      // Masked (-Inf) scores get exactly 0 probability (-Inf log-probability); the rest stay finite.
      std::vector<double> row(19, 0.0);
      for (std::size_t i = 10; i < row.size(); ++i) row[i] = -kInf;
      const std::vector<double> y = run(row);
      for (std::size_t i = 0; i < row.size(); ++i) {
        if (i < 10) expect_ieee(y[i], log ? std::log(0.1) : 0.1, 1e-6, what);
        else EXPECT_EQ(y[i], log ? -kInf : 0.0) << what << " masked " << i;
      }
      // Scores 100 apart: e^-100 is a denormal in f32, not flushed and not garbage.
      const std::vector<double> far = run({0.0, -100.0, 0.0, -100.0, 0.0, -100.0, 0.0, -100.0, 0.0});
      expect_ieee(far[1], log ? -100.0 - std::log(5.0) : std::exp(-100.0) / 5.0, dtype == DType::f32 ? 1e-2 : 1e-12, what);
      // Every score -Inf: 0/0, NaN as in PyTorch.
      for (double v : run(std::vector<double>(9, -kInf))) EXPECT_TRUE(std::isnan(v)) << what << " all -inf";
    }
  // The strided (not last axis) path too.
  const Tensor x = tensor_of({1.0, kNan, 2.0, 3.0}, DType::f32, {2, 2});
  const std::vector<double> y = values(kernels::softmax(x, 0));
  EXPECT_FALSE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(y[1]) && std::isnan(y[3]));
}

TEST(NonFinite, LayernormAndCrossEntropyPropagateNan) {
  std::vector<double> v(24, 0.25);
  v[7] = kNan;
  const Tensor x = tensor_of(v, DType::f32, {2, 12});
  const auto out = kernels::layernorm(x, Tensor::full({12}, 1.0), Tensor::zeros({12}));
  const std::vector<double> y = values(out.y);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_TRUE(std::isnan(y[i])) << "row 0 holds the NaN, at " << i;
  for (std::size_t i = 12; i < 24; ++i) EXPECT_FALSE(std::isnan(y[i])) << "row 1 is clean, at " << i;

  const Tensor targets = Tensor::from_vector<std::int64_t>({0, 1}, {2});
  for (double bad : {kNan, kInf}) {
    const Tensor logits = tensor_of({0.0, 1.0, bad, 0.5, 0.5, 0.5}, DType::f32, {2, 3});
    EXPECT_TRUE(std::isnan(values(kernels::cross_entropy(logits, targets))[0])) << "logit " << bad;
  }
}
