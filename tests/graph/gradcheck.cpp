#include "graph/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/rng.hpp"

namespace troupe::test {

using graph::Var;

Tensor random_f64(const Shape& shape, std::uint64_t seed, double low, double high) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  gen.uniform_(t, low, high);
  return t;
}

Var weighted_sum(const Var& y, std::uint64_t seed) {
  const Shape s = graph::to_static(y.shape(), "weighted_sum");
  Tensor r = random_f64(s, seed, 0.5, 1.5);
  return graph::sum(y * Var(r.to(y.dtype())));
}

void expect_gradients_match(const LossFn& loss, const std::vector<Tensor>& inputs, double rtol, double atol) {
  std::vector<Var> all, leaves;
  for (const Tensor& t : inputs) {
    all.push_back(is_floating(t.dtype()) ? Var::leaf(t.clone(), "in" + std::to_string(all.size())) : Var(t.clone()));
    if (all.back().requires_grad()) leaves.push_back(all.back());
  }
  expect_leaf_gradients_match([&] { return loss(all); }, leaves, rtol, atol);
}

void expect_leaf_gradients_match(const std::function<Var()>& loss, const std::vector<Var>& leaves, double rtol,
                                 double atol) {
  for (const Var& v : leaves) {
    ASSERT_TRUE(v.requires_grad() && v.dtype() == DType::f64 && v.tensor().is_contiguous())
        << "gradient checks need contiguous f64 leaves; '" << v.name() << "' is " << v.tensor().str();
    v.zero_grad();
  }
  const Var eager_loss = loss();
  graph::backward(eager_loss);
  std::vector<Tensor> eager_grads;
  for (const Var& v : leaves) {
    eager_grads.push_back(v.grad());
    v.zero_grad();
  }

  const graph::TracedFunction traced =
      graph::trace([&](const std::vector<Var>&) { return std::vector<Var>{loss()}; }, {}).with_gradients();
  const Tensor traced_loss = traced({})[0];
  const double l0 = values(eager_loss.tensor())[0];
  EXPECT_NEAR(values(traced_loss)[0], l0, 1e-12 * (1 + std::abs(l0))) << "traced and eager losses differ";

  const double h = 1e-6;
  for (std::size_t k = 0; k < leaves.size(); ++k) {
    const Tensor data = leaves[k].tensor();
    SCOPED_TRACE("leaf '" + leaves[k].name() + "' " + data.str());
    // No gradient means the loss does not depend on the leaf: the differences must then be 0.
    const auto zeros = std::vector<double>(static_cast<std::size_t>(data.numel()), 0.0);
    const auto ge = eager_grads[k].defined() ? values(eager_grads[k]) : zeros;
    const auto gt = leaves[k].grad().defined() ? values(leaves[k].grad()) : zeros;
    double* x = data.data<double>();  // the leaf's own storage, so loss() sees the perturbation
    for (std::int64_t i = 0; i < data.numel(); ++i) {
      const double orig = x[i];
      graph::NoGradGuard no_grad;
      x[i] = orig + h;
      const double lp = values(loss().tensor())[0];
      x[i] = orig - h;
      const double lm = values(loss().tensor())[0];
      x[i] = orig;
      const double fd = (lp - lm) / (2 * h);
      const double tol = atol + rtol * std::abs(fd) + 1e-9 * std::abs(lp);
      EXPECT_NEAR(ge[static_cast<std::size_t>(i)], fd, tol) << "eager gradient, element " << i;
      EXPECT_NEAR(gt[static_cast<std::size_t>(i)], fd, tol) << "traced gradient, element " << i;
    }
    leaves[k].zero_grad();
  }
}

}  // namespace troupe::test
