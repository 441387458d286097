// Elementwise kernels against double references: broadcasting, scalars, strided views, activations
// and their backward (checked by the analytic derivative and by central differences).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "kernels/reference.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/registry.hpp"

using namespace troupe;
using namespace troupe::test;
using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

double ref_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
  }
  return 0;
}

// Reference of a broadcast binary op computed element by element with explicit index maps.
std::vector<double> ref_broadcast(BinaryOp op, const Tensor& a, const Tensor& b, const Shape& out) {
  const auto av = values(a), bv = values(b);
  std::vector<double> r(static_cast<std::size_t>(shape_numel(out)));
  auto flat = [&](const std::vector<std::int64_t>& idx, const Shape& s) {
    std::int64_t f = 0;
    const std::size_t lead = out.size() - s.size();
    for (std::size_t d = 0; d < s.size(); ++d) f = f * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
    return f;
  };
  for (std::size_t i = 0; i < r.size(); ++i) {
    const auto idx = unravel(static_cast<std::int64_t>(i), out);
    r[i] = ref_binary(op, av[flat(idx, a.shape())], bv[flat(idx, b.shape())]);
  }
  return r;
}

double ref_unary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::relu: return x > 0 ? x : 0;
    case UnaryOp::gelu: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
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

bool positive_domain(UnaryOp op) { return op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt; }

}  // namespace

TEST(Binary, BroadcastingShapes) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{7}, {7}},           {{3, 5}, {5}},          {{3, 1}, {1, 4}},   {{2, 3, 4}, {3, 1}},
      {{1}, {2, 9}},        {{}, {3, 2}},           {{5, 1, 3}, {1, 6, 1}}, {{1, 1}, {1, 1}},
      {{4, 33}, {4, 33}},   {{2, 1, 17}, {2, 5, 17}}};
  std::uint64_t seed = 1;
  for (auto [sa, sb] : cases)
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
      Tensor a = random_tensor(sa, seed++), b = random_tensor(sb, seed++, 0.5, 2.0);
      const Shape out = broadcast_shapes(sa, sb, "test");
      expect_close(kernels::binary(op, a, b), ref_broadcast(op, a, b, out), out);
    }
}

TEST(Binary, NonContiguousInputs) {
  Tensor base = random_tensor({6, 8}, 3);
  Tensor a = base.transpose(0, 1);           // [8, 6], strided
  Tensor b = random_tensor({6, 16}, 4).slice(1, 0, 16, 2).transpose(0, 1);  // [8, 6], step 2
  expect_close(kernels::mul(a, b), ref_broadcast(BinaryOp::mul, a, b, {8, 6}), {8, 6});
  Tensor e = random_tensor({6, 1}, 5).expand({6, 8});
  expect_close(kernels::sub(base, e), ref_broadcast(BinaryOp::sub, base, e, {6, 8}), {6, 8});
}

TEST(Binary, ScalarForms) {
  Tensor a = random_tensor({3, 7}, 9);
  const auto av = values(a);
  std::vector<double> r(av.size());
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
    for (std::size_t i = 0; i < av.size(); ++i) r[i] = ref_binary(op, av[i], 0.37);
    expect_close(kernels::binary(op, a, 0.37), r, {3, 7});
  }
}

TEST(Binary, BadInput) {
  Tensor a = random_tensor({3, 4}, 1), b = random_tensor({3, 5}, 2);
  try {
    kernels::add(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::shape_mismatch);
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 5]"), std::string::npos) << m;
  }
  try {
    kernels::mul(a, Tensor::zeros({3, 4}, DType::i32));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::dtype_mismatch);
    EXPECT_NE(std::string(e.what()).find("mul"), std::string::npos);
  }
  EXPECT_THROW(kernels::add(a, Tensor()), Error);
}

TEST(Unary, ForwardMatchesReference) {
  for (UnaryOp op : kAllUnary) {
    Tensor x = positive_domain(op) ? random_tensor({5, 13}, 21, 0.1, 3.0) : random_tensor({5, 13}, 21, -4.0, 4.0);
    std::vector<double> r;
    for (double v : values(x)) r.push_back(ref_unary(op, v));
    expect_close(kernels::unary(op, x), r, {5, 13}, 2e-6, 1e-6);
    // And through a transposed view.
    Tensor xt = x.transpose(0, 1);
    std::vector<double> rt;
    for (double v : values(xt)) rt.push_back(ref_unary(op, v));
    expect_close(kernels::unary(op, xt), rt, {13, 5}, 2e-6, 1e-6);
  }
}

TEST(Unary, BackwardMatchesCentralDifferences) {
  for (UnaryOp op : kAllUnary) {
    Tensor x = positive_domain(op) ? random_tensor({4, 9}, 31, 0.2, 3.0) : random_tensor({4, 9}, 31, -3.0, 3.0);
    Tensor g = random_tensor({4, 9}, 32);
    const auto xv = values(x), gv = values(g);
    std::vector<double> r;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const double h = 1e-6;
      r.push_back(gv[i] * (ref_unary(op, xv[i] + h) - ref_unary(op, xv[i] - h)) / (2 * h));
    }
    expect_close(kernels::unary_backward(op, g, x), r, {4, 9}, 1e-4, 1e-5);
  }
}

TEST(Unary, LeakyReluBackward) {
  Tensor x = Tensor::from_vector(std::vector<float>{-2.f, -0.f, 0.f, 0.5f, 3.f}, {5});
  Tensor g = Tensor::from_vector(std::vector<float>{1.f, 2.f, 3.f, 4.f, 5.f}, {5});
  expect_close(kernels::relu_backward(g, x), {0, 0, 0, 4, 5}, {5});
  expect_close(kernels::relu_backward(g, x, 0.01), {0.01, 0.02, 0.03, 4, 5}, {5});
  expect_close(kernels::relu_backward(g, x, 0.2), {0.2, 0.4, 0.6, 4, 5}, {5});
  EXPECT_THROW(kernels::relu_backward(g, Tensor::zeros({4})), Error);
}

// The bf16 and f16 kernels of the binary ops (mixed precision sums the gradients of a value read
// twice in them): each element computed in f32 from the widened operands and rounded once, so the
// bits equal the scalar conversions', on dense, strided and broadcast operands.
TEST(Binary, LowPrecisionKernelsComputeInF32AndRoundOnce) {
  const auto same_bits = [](const Tensor& x, const Tensor& y) {
    const auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
    return xv.size() == yv.size() && std::memcmp(xv.data(), yv.data(), xv.size() * sizeof(float)) == 0;
  };
  for (DType low : {DType::bf16, DType::f16}) {
    const Tensor a = random_tensor({6, 8}, 3).to(low).transpose(0, 1);  // strided
    const Tensor b = random_tensor({8, 1}, 4, 0.5, 2.0).to(low);         // broadcast
    const Tensor c = random_tensor({8, 6}, 5).to(low);                   // dense
    for (const auto& [op, name] : {std::pair{BinaryOp::add, "add"}, {BinaryOp::sub, "sub"}, {BinaryOp::mul, "mul"},
                                   {BinaryOp::div, "div"}}) {
      for (const Tensor& rhs : {b, c}) {
        std::vector<Tensor> out{Tensor::empty({8, 6}, low)};
        dispatch(name, {a, rhs}, out, {});
        const Tensor wide = out[0].to(DType::f32);
        const Tensor expected = kernels::binary(op, a.to(DType::f32), rhs.to(DType::f32)).to(low).to(DType::f32);
        EXPECT_TRUE(same_bits(wide, expected)) << name << " " << dtype_name(low);
      }
      std::vector<Tensor> out{Tensor::empty({8, 6}, low)};
      dispatch(std::string(name) + "_scalar", {a}, out, Attrs().set("value", 0.37));
      const Tensor expected = kernels::binary(op, a.to(DType::f32), 0.37).to(low).to(DType::f32);
      EXPECT_TRUE(same_bits(out[0].to(DType::f32), expected)) << name << "_scalar " << dtype_name(low);
    }
  }
}

// The bf16 and f16 kernels of the unary ops, their backward ops, relu's and the bias-gelu pair:
// the f32 kernel's loop on the widened inputs, rounded once, so exactly the f32 kernel's result
// rounded, for dense and broadcast operands alike.
TEST(Unary, LowPrecisionKernelsAreTheF32OnesRoundedOnce) {
  for (DType low : {DType::bf16, DType::f16}) {
    const auto check = [&](const std::string& name, std::vector<Tensor> in, const Attrs& attrs = {}) {
      std::vector<Tensor> wide_in;
      for (Tensor& t : in) t = t.to(low), wide_in.push_back(t.to(DType::f32));
      std::vector<Tensor> out{Tensor::empty(in[0].shape(), low)}, ref{Tensor::empty(in[0].shape())};
      dispatch(name, in, out, attrs);
      dispatch(name, wide_in, ref, attrs);
      const auto got = values(out[0].to(DType::f32)), want = values(ref[0].to(low).to(DType::f32));
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))
            << name << " " << dtype_name(low) << " " << i << ": " << got[i] << " vs " << want[i];
    };
    for (UnaryOp op : kAllUnary) {
      const Tensor x = positive_domain(op) ? random_tensor({7, 9}, 1, 0.1, 3.0) : random_tensor({7, 9}, 1);
      const std::string name = kernels::to_string(op);
      check(name, {x});
      if (op != UnaryOp::relu) check(name + "_backward", {random_tensor({7, 9}, 2), x});
    }
    check("relu_backward", {random_tensor({7, 9}, 2), random_tensor({7, 9}, 3)}, Attrs().set("negative_slope", 0.1));
    check("bias_gelu", {random_tensor({7, 9}, 4), random_tensor({9}, 5)});
    check("bias_gelu_backward", {random_tensor({7, 9}, 6), random_tensor({7, 9}, 4), random_tensor({9}, 5)});
  }
}
