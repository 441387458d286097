// conv2d forward/backward against direct loops in double; pixel shuffle, concat and split.
#include <gtest/gtest.h>

#include "kernels/reference.hpp"
#include "troupe/kernels/conv.hpp"
#include "troupe/kernels/layout.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

struct Case {
  Shape x, w;
  kernels::Conv2dParams p;
};

// Direct convolution in double: y[n,o,y,x] = sum_c,i,j x[n,c,y*s-p+i,x*s-p+j] w[o,c,i,j].
std::vector<double> ref_conv(const std::vector<double>& x, const std::vector<double>& w, const Case& c, Shape& out) {
  const auto N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], O = c.w[0], KH = c.w[2], KW = c.w[3];
  const auto HO = (H + 2 * c.p.pad_h - KH) / c.p.stride_h + 1, WO = (W + 2 * c.p.pad_w - KW) / c.p.stride_w + 1;
  out = {N, O, HO, WO};
  std::vector<double> y(static_cast<std::size_t>(N * O * HO * WO), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t yy = 0; yy < HO; ++yy)
        for (std::int64_t xx = 0; xx < WO; ++xx) {
          double s = 0;
          for (std::int64_t ch = 0; ch < C; ++ch)
            for (std::int64_t i = 0; i < KH; ++i)
              for (std::int64_t j = 0; j < KW; ++j) {
                const auto iy = yy * c.p.stride_h - c.p.pad_h + i, ix = xx * c.p.stride_w - c.p.pad_w + j;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                  s += x[((n * C + ch) * H + iy) * W + ix] * w[((o * C + ch) * KH + i) * KW + j];
              }
          y[((n * O + o) * HO + yy) * WO + xx] = s;
        }
  return y;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST(Conv2d, ForwardAndBackwardAgainstDirectLoops) {
  kernels::Conv2dParams s1, s2p1, s2;
  s2p1.stride_h = s2p1.stride_w = 2;
  s2p1.pad_h = s2p1.pad_w = 1;
  s2.stride_h = 2;
  s2.pad_w = 1;
  const std::vector<Case> cases = {{{1, 1, 5, 5}, {1, 1, 3, 3}, s1},  {{2, 3, 7, 6}, {4, 3, 3, 3}, s2p1},
                                   {{2, 2, 5, 8}, {3, 2, 1, 1}, s1},  {{1, 3, 9, 7}, {2, 3, 3, 2}, s2},
                                   {{3, 4, 4, 4}, {5, 4, 3, 3}, s2p1}};
  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++), b = random_tensor({c.w[0]}, seed++);
    Shape out;
    auto ref = ref_conv(values(x), values(w), c, out);
    const auto bv = values(b);
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += bv[(i / (out[2] * out[3])) % out[1]];
    expect_close(kernels::conv2d(x, w, b, c.p), ref, out, 1e-5, 1e-5);

    // Backward via the adjoint identity: <dy, conv(x, w)> is linear in x and in w, so its
    // gradient with respect to element k is conv of the k-th unit vector; check a sample of them.
    Tensor dy = random_tensor(out, seed++);
    const auto dyv = values(dy);
    Tensor dx = kernels::conv2d_backward_data(dy, w, c.x, c.p);
    Tensor dw = kernels::conv2d_backward_weight(dy, x, c.w, c.p);
    const auto dxv = values(dx), dwv = values(dw), xv = values(x), wv = values(w);
    for (std::size_t k = 0; k < xv.size(); k += 3) {
      std::vector<double> e(xv.size(), 0.0);
      e[k] = 1.0;
      Shape o2;
      EXPECT_NEAR(dxv[k], dot(dyv, ref_conv(e, wv, c, o2)), 1e-4) << "dx " << k;
    }
    for (std::size_t k = 0; k < wv.size(); ++k) {
      std::vector<double> e(wv.size(), 0.0);
      e[k] = 1.0;
      Shape o2;
      EXPECT_NEAR(dwv[k], dot(dyv, ref_conv(xv, e, c, o2)), 1e-4) << "dw " << k;
    }
    std::vector<double> db(static_cast<std::size_t>(out[1]), 0.0);
    for (std::size_t i = 0; i < dyv.size(); ++i) db[(i / (out[2] * out[3])) % out[1]] += dyv[i];
    expect_close(kernels::conv2d_backward_bias(dy), db, {out[1]}, 1e-5, 1e-5);
  }
}

TEST(Conv2d, NoBiasAndNonContiguousInput) {
  Case c{{1, 2, 4, 5}, {3, 2, 3, 3}, {}};
  Tensor x = random_tensor({1, 2, 5, 4}, 3).transpose(2, 3);
  Tensor w = random_tensor(c.w, 4);
  Shape out;
  expect_close(kernels::conv2d(x, w, Tensor(), c.p), ref_conv(values(x), values(w), c, out), out, 1e-5, 1e-5);
}

// Mixed precision's convolutions: bf16 operands on oneDNN with f32 accumulation, the forward
// written as f32 (with an f32 bias), the gradients in bf16; against f32 on the same rounded values.
TEST(Conv2d, Bf16OperandsAccumulateInF32) {
  const kernels::Conv2dParams p{1, 1, 1, 1};
  const Tensor x = random_tensor({2, 16, 9, 7}, 1).to(DType::bf16), w = random_tensor({8, 16, 3, 3}, 2).to(DType::bf16);
  const Tensor b = random_tensor({8}, 3), dy = random_tensor({2, 8, 9, 7}, 4).to(DType::bf16);
  const Tensor xf = x.to(DType::f32), wf = w.to(DType::f32), dyf = dy.to(DType::f32);
  const Tensor y = kernels::conv2d(x, w, b, p, DType::f32);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_LE(scaled_max_error(y, kernels::conv2d(xf, wf, b, p)), 1e-5);
  const Tensor dx = kernels::conv2d_backward_data(dy, w, x.shape(), p);
  const Tensor dw = kernels::conv2d_backward_weight(dy, x, w.shape(), p);
  EXPECT_EQ(dx.dtype(), DType::bf16);
  EXPECT_EQ(dw.dtype(), DType::bf16);
  EXPECT_LE(scaled_max_error(dx.to(DType::f32), kernels::conv2d_backward_data(dyf, wf, x.shape(), p)), 8e-3);
  EXPECT_LE(scaled_max_error(dw.to(DType::f32), kernels::conv2d_backward_weight(dyf, xf, w.shape(), p)), 8e-3);
  // bf16 written as bf16 needs a bf16 bias; f32 operands cannot be written as bf16.
  EXPECT_THROW(kernels::conv2d(x, w, b, p), Error);
  EXPECT_EQ(kernels::conv2d(x, w, b.to(DType::bf16), p).dtype(), DType::bf16);
  EXPECT_THROW(kernels::conv2d(xf, wf, b, p, DType::bf16), Error);
  EXPECT_THROW(kernels::conv2d(x, wf, b, p, DType::f32), Error);
}

TEST(Conv2d, BadInput) {
  Tensor x = random_tensor({1, 3, 8, 8}, 1);
  try {
    kernels::conv2d(x, random_tensor({4, 2, 3, 3}, 2), Tensor(), {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("conv2d"), std::string::npos);
    EXPECT_NE(m.find("[1, 3, 8, 8]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 2, 3, 3]"), std::string::npos) << m;
  }
  EXPECT_THROW(kernels::conv2d(x, random_tensor({4, 3, 9, 9}, 2), Tensor(), {}), Error);
  EXPECT_THROW(kernels::conv2d(x, random_tensor({4, 3, 3, 3}, 2), random_tensor({3}, 3), {}), Error);
  EXPECT_THROW(kernels::conv2d(random_tensor({3, 8, 8}, 1), random_tensor({4, 3, 3, 3}, 2), Tensor(), {}), Error);
  EXPECT_THROW(kernels::conv2d_backward_data(random_tensor({1, 4, 5, 5}, 1), random_tensor({4, 3, 3, 3}, 2),
                                         {1, 3, 8, 8}, {}),
               Error);
}

TEST(PixelShuffle, MatchesIndexFormulaAndInverts) {
  const std::int64_t n = 2, c = 3, r = 2, h = 3, w = 4;
  Tensor x = random_tensor({n, c * r * r, h, w}, 5);
  const auto xv = values(x);
  std::vector<double> ref(xv.size());
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t y = 0; y < h * r; ++y)
        for (std::int64_t xx = 0; xx < w * r; ++xx) {
          const std::int64_t src_c = ch * r * r + (y % r) * r + (xx % r);
          ref[((b * c + ch) * h * r + y) * w * r + xx] = xv[((b * c * r * r + src_c) * h + y / r) * w + xx / r];
        }
  Tensor y = kernels::pixel_shuffle(x, r);
  expect_close(y, ref, {n, c, h * r, w * r}, 0, 0);
  expect_close(kernels::pixel_unshuffle(y, r), xv, x.shape(), 0, 0);
  EXPECT_THROW(kernels::pixel_shuffle(random_tensor({1, 6, 2, 2}, 1), 2), Error);
  EXPECT_THROW(kernels::pixel_unshuffle(random_tensor({1, 1, 3, 4}, 1), 2), Error);
}

TEST(ConcatSplit, RoundTripAndErrors) {
  Tensor a = random_tensor({2, 3, 4}, 1), b = random_tensor({2, 1, 4}, 2), c = random_tensor({2, 2, 4}, 3);
  Tensor cat = kernels::concat({a, b, c}, 1);
  EXPECT_EQ(cat.shape(), (Shape{2, 6, 4}));
  auto parts = kernels::split(cat, {3, 1, 2}, -2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(values(parts[0]), values(a));
  EXPECT_EQ(values(parts[1]), values(b));
  EXPECT_EQ(values(parts[2]), values(c));
  EXPECT_EQ(parts[1].storage(), cat.storage());  // split returns views
  EXPECT_EQ(values(kernels::concat({a.transpose(0, 2)}, 0)), values(a.transpose(0, 2)));
  EXPECT_THROW(kernels::concat({a, random_tensor({2, 3, 5}, 4)}, 1), Error);
  EXPECT_THROW(kernels::concat({a, a.to(DType::bf16)}, 0), Error);
  EXPECT_THROW(kernels::split(cat, {3, 3, 1}, 1), Error);
  EXPECT_THROW(kernels::concat({}, 0), Error);
}
