#pragma once
// Layer normalisation over the last dimension, with its backward pass.

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Outputs of layernorm: y, and the per-row mean and 1/sqrt(var + eps) (shape = x without last dim).
struct LayerNormOutput {
  Tensor y, mean, rstd;
};
/// y = (x - mean) * rstd * gamma + beta over the last dim; gamma and beta have shape [D].
LayerNormOutput layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);

/// Gradients of layernorm wrt x, gamma and beta.
struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};
/// Backward of layernorm from the saved mean and rstd of the forward.
LayerNormGrads layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd);

}  // namespace troupe::kernels
