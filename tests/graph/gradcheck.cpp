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
  std::vector<Var> leaves;
  std::vector<Tensor> data;
  for (const Tensor& t : inputs) {
    data.push_back(t.clone());
    leaves.push_back(is_floating(t.dtype()) ? Var::leaf(data.back(), "in" + std::to_string(leaves.size()))
                                            : Var(data.back()));
  }
  const Var eager_loss = loss(leaves);
  graph::backward(eager_loss);
  std::vector<Tensor> eager_grads;
  for (const Var& v : leaves) {
    eager_grads.push_back(v.requires_grad() ? v.grad() : Tensor());
    if (v.requires_grad()) v.zero_grad();
  }

  const graph::TracedFunction traced =
      graph::trace([&](const std::vector<Var>&) { return std::vector<Var>{loss(leaves)}; }, {}).with_gradients();
  const Tensor traced_loss = traced({})[0];
  EXPECT_NEAR(values(traced_loss)[0], values(eager_loss.tensor())[0],
              1e-12 * (1 + std::abs(values(eager_loss.tensor())[0])))
      << "traced and eager losses differ";

  const double h = 1e-6;
  for (std::size_t k = 0; k < leaves.size(); ++k) {
    if (!leaves[k].requires_grad()) continue;
    SCOPED_TRACE("input " + std::to_string(k) + " " + data[k].str());
    // No gradient means the loss does not depend on the input: the differences must then be 0.
    const auto zeros = std::vector<double>(static_cast<std::size_t>(data[k].numel()), 0.0);
    const auto ge = eager_grads[k].defined() ? values(eager_grads[k]) : zeros;
    const auto gt = leaves[k].grad().defined() ? values(leaves[k].grad()) : zeros;
    double* x = data[k].data<double>();  // the leaves share this storage, so perturbing it is seen by loss()
    for (std::int64_t i = 0; i < data[k].numel(); ++i) {
      const double orig = x[i];
      graph::NoGradGuard no_grad;
      x[i] = orig + h;
      const double lp = values(loss(leaves).tensor())[0];
      x[i] = orig - h;
      const double lm = values(loss(leaves).tensor())[0];
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
