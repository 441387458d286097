// Every floating-point CPU kernel runs in f64 and agrees with its f32 result; f64 inputs give f64
// outputs; mixing f32 and f64 is refused. f64 is what the gradient checks of the graph layer use.
#include <gtest/gtest.h>

#include <functional>

#include "kernels/reference.hpp"
#include "troupe/kernels/conv.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/embedding.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/layernorm.hpp"
#include "troupe/kernels/layout.hpp"
#include "troupe/kernels/loss.hpp"
#include "troupe/kernels/matmul.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/rng.hpp"
#include "troupe/kernels/reduce.hpp"
#include "troupe/kernels/select.hpp"
#include "troupe/kernels/softmax.hpp"

using namespace troupe;
using troupe::kernels::BinaryOp;
using troupe::kernels::UnaryOp;

namespace {
// Runs `f` on f32 inputs and on the same inputs in f64; the f64 result must be f64 and match.
void expect_f64_matches_f32(const char* what, const std::vector<Tensor>& inputs,
                            const std::function<Tensor(const std::vector<Tensor>&)>& f, double rtol = 1e-4) {
  std::vector<Tensor> wide;
  for (const Tensor& t : inputs) wide.push_back(t.dtype() == DType::f32 ? t.to(DType::f64) : t);
  Tensor narrow_out = f(inputs), wide_out = f(wide);
  SCOPED_TRACE(what);
  EXPECT_EQ(wide_out.dtype(), DType::f64);
  test::expect_close(narrow_out, test::values(wide_out), wide_out.shape(), rtol, 1e-5);
}
}  // namespace

TEST(F64, ElementwiseAndBackward) {
  Tensor a = test::random_tensor({3, 4}, 1, 0.5, 2.0), b = test::random_tensor({4}, 2, 0.5, 2.0);
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
    expect_f64_matches_f32(kernels::to_string(op), {a, b}, [op](auto& in) { return kernels::binary(op, in[0], in[1]); });
    expect_f64_matches_f32(kernels::to_string(op), {a}, [op](auto& in) { return kernels::binary(op, in[0], 1.5); });
  }
  for (UnaryOp op : {UnaryOp::relu, UnaryOp::gelu, UnaryOp::silu, UnaryOp::exp, UnaryOp::log, UnaryOp::tanh,
                     UnaryOp::sqrt, UnaryOp::rsqrt, UnaryOp::neg}) {
    expect_f64_matches_f32(kernels::to_string(op), {a}, [op](auto& in) { return kernels::unary(op, in[0]); });
    expect_f64_matches_f32(kernels::to_string(op), {a, a},
                           [op](auto& in) { return kernels::unary_backward(op, in[0], in[1]); });
  }
  expect_f64_matches_f32("relu_backward", {a, a}, [](auto& in) { return kernels::relu_backward(in[0], in[1], 0.1); });
}

TEST(F64, MatmulReduceSoftmax) {
  Tensor a = test::random_tensor({2, 3, 5}, 3), b = test::random_tensor({2, 4, 5}, 4);
  expect_f64_matches_f32("matmul", {a, b}, [](auto& in) { return kernels::matmul(in[0], in[1], false, true); });
  expect_f64_matches_f32("sum", {a}, [](auto& in) { return kernels::sum(in[0], {1}); });
  expect_f64_matches_f32("mean", {a}, [](auto& in) { return kernels::mean(in[0], {0, 2}, true); });
  expect_f64_matches_f32("max", {a}, [](auto& in) { return kernels::max(in[0], {2}, true); });
  expect_f64_matches_f32("max_backward", {a}, [](auto& in) {
    Tensor y = kernels::max(in[0], {2}, true);
    return kernels::max_backward(kernels::add(y, 1.0), in[0], y);
  });
  expect_f64_matches_f32("softmax", {a}, [](auto& in) { return kernels::softmax(in[0]); });
  expect_f64_matches_f32("log_softmax", {a}, [](auto& in) { return kernels::log_softmax(in[0], 1); });
  expect_f64_matches_f32("softmax_backward", {a, a}, [](auto& in) {
    return kernels::softmax_backward(in[1], kernels::softmax(in[0]));
  });
  expect_f64_matches_f32("causal_mask", {test::random_tensor({2, 4, 4}, 5)},
                         [](auto& in) { return kernels::causal_mask(in[0], -1e9); });
}

TEST(F64, NormalisationLossEmbedding) {
  Tensor x = test::random_tensor({4, 6}, 6), g = test::random_tensor({6}, 7), be = test::random_tensor({6}, 8);
  expect_f64_matches_f32("layernorm", {x, g, be}, [](auto& in) { return kernels::layernorm(in[0], in[1], in[2]).y; });
  expect_f64_matches_f32("layernorm_backward", {x, g, be}, [](auto& in) {
    auto out = kernels::layernorm(in[0], in[1], in[2]);
    return kernels::layernorm_backward(in[2].expand({4, 6}), in[0], in[1], out.mean, out.rstd).dx;
  });
  Tensor targets = Tensor::from_vector<std::int64_t>({0, 5, 2, 3}, {4});
  expect_f64_matches_f32("cross_entropy", {x, targets}, [](auto& in) { return kernels::cross_entropy(in[0], in[1]); });
  expect_f64_matches_f32("cross_entropy_backward", {x, targets}, [](auto& in) {
    return kernels::cross_entropy_backward(Tensor::scalar(1.0, in[0].dtype()), in[0], in[1]);
  });
  Tensor ids = Tensor::from_vector<std::int64_t>({1, 3, 1}, {3});
  expect_f64_matches_f32("embedding", {x, ids}, [](auto& in) { return kernels::embedding(in[0], in[1]); });
  expect_f64_matches_f32("embedding_backward", {test::random_tensor({3, 6}, 9), ids},
                         [](auto& in) { return kernels::embedding_backward(in[0], in[1], 4); });
}

TEST(F64, ConvolutionAndLayout) {
  Tensor x = test::random_tensor({1, 2, 5, 5}, 10), w = test::random_tensor({3, 2, 3, 3}, 11);
  Tensor bias = test::random_tensor({3}, 12), dy = test::random_tensor({1, 3, 5, 5}, 13);
  kernels::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  expect_f64_matches_f32("conv2d", {x, w, bias}, [&](auto& in) { return kernels::conv2d(in[0], in[1], in[2], p); });
  expect_f64_matches_f32("conv2d_backward_data", {dy, w},
                         [&](auto& in) { return kernels::conv2d_backward_data(in[0], in[1], x.shape(), p); });
  expect_f64_matches_f32("conv2d_backward_weight", {dy, x},
                         [&](auto& in) { return kernels::conv2d_backward_weight(in[0], in[1], w.shape(), p); });
  expect_f64_matches_f32("conv2d_backward_bias", {dy}, [](auto& in) { return kernels::conv2d_backward_bias(in[0]); });
  Tensor c = test::random_tensor({1, 8, 2, 2}, 14);
  expect_f64_matches_f32("pixel_shuffle", {c}, [](auto& in) { return kernels::pixel_shuffle(in[0], 2); });
  expect_f64_matches_f32("concat", {c, c}, [](auto& in) { return kernels::concat({in[0], in[1]}, 1); });
}

TEST(F64, OptimizerUpdatesAndNorms) {
  Tensor p32 = test::random_tensor({5}, 15), g32 = test::random_tensor({5}, 16);
  Tensor p64 = p32.to(DType::f64), g64 = g32.to(DType::f64);
  EXPECT_NEAR(kernels::squared_norm(g64), kernels::squared_norm(g32), 1e-5);
  kernels::AdamWParams ap;
  Tensor m32 = Tensor::zeros({5}), v32 = Tensor::zeros({5});
  Tensor m64 = Tensor::zeros({5}, DType::f64), v64 = Tensor::zeros({5}, DType::f64);
  kernels::adamw_update_(p32, g32, m32, v32, ap, 1);
  kernels::adamw_update_(p64, g64, m64, v64, ap, 1);
  test::expect_close(p32, test::values(p64), {5}, 1e-5, 1e-6);
  kernels::SgdParams sp;
  sp.momentum = 0.9;
  Tensor b32 = Tensor::zeros({5}), b64 = Tensor::zeros({5}, DType::f64);
  kernels::sgd_update_(p32, g32, b32, sp, true);
  kernels::sgd_update_(p64, g64, b64, sp, true);
  test::expect_close(p32, test::values(p64), {5}, 1e-5, 1e-6);
  kernels::scale_(p64, 2.0);
  kernels::scale_(p32, 2.0);
  test::expect_close(p32, test::values(p64), {5}, 1e-5, 1e-6);
}

TEST(F64, MixedPrecisionIsRefused) {
  Tensor a = test::random_tensor({2, 2}, 17);
  Tensor b = a.to(DType::f64);
  EXPECT_THROW(kernels::add(a, b), Error);
  EXPECT_THROW(kernels::matmul(a, b), Error);
  EXPECT_THROW(kernels::layernorm(b, test::random_tensor({2}, 18), test::random_tensor({2}, 19)), Error);
}

TEST(F64, GeneratorFillsTheSameStream) {
  Tensor a = Tensor::empty({9}), b = Tensor::empty({9}, DType::f64);
  Generator(7).uniform_(a, -2.0, 3.0);
  Generator(7).uniform_(b, -2.0, 3.0);
  test::expect_close(a, test::values(b), {9}, 1e-7, 1e-7);
  Generator(8).normal_(b);
  for (double v : test::values(b)) EXPECT_NE(v, 0.0);
}
