// The gradient-path kernels: chunked squared norm, scaling, SGD (momentum, Nesterov) and AdamW.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/reference.hpp"
#include "troupe/kernels/optim.hpp"

using namespace troupe;
using namespace troupe::test;

TEST(SquaredNorm, MatchesDoubleReference) {
  for (std::int64_t n : {1, 15, 4096, 4097, 1000003}) {
    Tensor x = random_tensor({n}, static_cast<std::uint64_t>(n), -3, 3);
    double ref = 0;
    for (double v : values(x)) ref += v * v;
    EXPECT_NEAR(kernels::squared_norm(x), ref, 1e-6 * ref) << n;
  }
  // Mixed magnitudes: a naive float accumulator would lose the small terms entirely.
  std::vector<float> v(200000, 1e-3f);
  v[0] = 1e4f;
  double ref = 1e8;
  for (std::size_t i = 1; i < v.size(); ++i) ref += 1e-6 * (1.0 + 0 * i) * (double(1e-3f) * 1e-3f / 1e-6);
  EXPECT_NEAR(kernels::squared_norm(Tensor::from_vector(v, {200000})), ref, 1e-7 * ref);
  EXPECT_NEAR(kernels::squared_norm(random_tensor({30, 40}, 1).transpose(0, 1)),
              kernels::squared_norm(random_tensor({30, 40}, 1)), 1e-6 * 380);
  EXPECT_THROW(kernels::squared_norm(Tensor::zeros({3}, DType::i32)), Error);
}

TEST(Scale, InPlace) {
  Tensor x = random_tensor({5, 3}, 2);
  auto before = values(x);
  kernels::scale_(x, -0.25);
  auto after = values(x);
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], -0.25 * before[i], 1e-7);
  EXPECT_THROW(kernels::scale_(random_tensor({4, 4}, 1).transpose(0, 1), 2.0), Error);
}

TEST(Sgd, MomentumAndNesterovFollowPyTorch) {
  for (bool nesterov : {false, true}) {
    Tensor p = random_tensor({17}, 3), buf = Tensor::zeros({17});
    std::vector<double> pr = values(p), br(17, 0.0);
    kernels::SgdParams hp;
    hp.lr = 0.1;
    hp.momentum = 0.9;
    hp.weight_decay = 0.01;
    hp.nesterov = nesterov;
    for (int step = 0; step < 4; ++step) {
      Tensor g = random_tensor({17}, 100 + step);
      const auto gv = values(g);
      for (std::size_t i = 0; i < pr.size(); ++i) {
        double d = gv[i] + hp.weight_decay * pr[i];
        br[i] = step == 0 ? d : hp.momentum * br[i] + d;
        d = nesterov ? d + hp.momentum * br[i] : br[i];
        pr[i] -= hp.lr * d;
      }
      kernels::sgd_update_(p, g, buf, hp, step == 0);
    }
    expect_close(p, pr, {17}, 1e-5, 1e-6);
    expect_close(buf, br, {17}, 1e-5, 1e-6);
  }
  Tensor p = random_tensor({4}, 1);
  EXPECT_THROW(kernels::sgd_update_(p, random_tensor({5}, 2), Tensor::zeros({4}), {}, true), Error);
}

TEST(AdamW, FollowsPyTorchFormulas) {
  Tensor p = random_tensor({2, 9}, 4), m = Tensor::zeros({2, 9}), v = Tensor::zeros({2, 9});
  std::vector<double> pr = values(p), mr(18, 0.0), vr(18, 0.0);
  kernels::AdamWParams hp;
  hp.lr = 3e-3;
  hp.weight_decay = 0.1;
  for (std::int64_t step = 1; step <= 5; ++step) {
    Tensor g = random_tensor({2, 9}, 200 + static_cast<std::uint64_t>(step));
    const auto gv = values(g);
    for (std::size_t i = 0; i < pr.size(); ++i) {
      pr[i] *= 1 - hp.lr * hp.weight_decay;
      mr[i] = hp.beta1 * mr[i] + (1 - hp.beta1) * gv[i];
      vr[i] = hp.beta2 * vr[i] + (1 - hp.beta2) * gv[i] * gv[i];
      const double mhat = mr[i] / (1 - std::pow(hp.beta1, step)), vhat = vr[i] / (1 - std::pow(hp.beta2, step));
      pr[i] -= hp.lr * mhat / (std::sqrt(vhat) + hp.eps);
    }
    kernels::adamw_update_(p, g, m, v, hp, step);
  }
  expect_close(p, pr, {2, 9}, 1e-5, 1e-6);
  expect_close(m, mr, {2, 9}, 1e-5, 1e-7);
  expect_close(v, vr, {2, 9}, 1e-6, 1e-9);
  EXPECT_THROW(kernels::adamw_update_(p, p, m, v, hp, 0), Error);
  EXPECT_THROW(kernels::adamw_update_(p, p, m, Tensor::zeros({18}), hp, 1), Error);
}

// A gradient scale given to the update (a clip's coefficient) gives the bits of scaling the gradient
// in place first, and leaves the gradient as it was.
TEST(Optimizers, AGradientScaleInTheUpdateEqualsScalingTheGradientFirst) {
  const Tensor g = test::random_tensor({5000}, 2);
  const double scale = 0.3719;
  for (int which = 0; which < 2; ++which) {
    Tensor p1 = test::random_tensor({5000}, 1), m1 = Tensor::full({5000}, 0.01f), v1 = Tensor::full({5000}, 0.02f);
    Tensor p2 = p1.clone(), m2 = m1.clone(), v2 = v1.clone();
    const Tensor scaled = g.clone(), kept = g.clone();
    kernels::scale_(scaled, scale);
    for (std::int64_t step = 1; step <= 3; ++step) {
      if (which == 0) {
        kernels::adamw_update_(p1, scaled, m1, v1, kernels::AdamWParams{}, step);
        kernels::adamw_update_(p2, kept, m2, v2, kernels::AdamWParams{}, step, scale);
      } else {
        kernels::SgdParams sgd;
        sgd.momentum = 0.9;
        sgd.weight_decay = 0.01;
        kernels::sgd_update_(p1, scaled, m1, sgd, step == 1);
        kernels::sgd_update_(p2, kept, m2, sgd, step == 1, scale);
      }
    }
    SCOPED_TRACE(which == 0 ? "adamw" : "sgd");
    for (const auto& [a, b] : {std::pair<Tensor, Tensor>{p1, p2}, {m1, m2}, {v1, v2}})
      EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
    EXPECT_EQ(std::memcmp(kept.raw_data(), g.raw_data(), g.nbytes()), 0) << "the gradient is left as it was";
  }
}
