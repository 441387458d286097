#pragma once
// Layer normalisation over the last dimension, with its backward pass.

#include <optional>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Outputs of layernorm: y, and the per-row mean and 1/sqrt(var + eps) (shape = x without last dim;
/// f32 for bf16 and f16 x, which are computed in f32 rows).
struct LayerNormOutput {
  Tensor y, mean, rstd;
};
/// y = (x - mean) * rstd * gamma + beta over the last dim; gamma and beta have shape [D]. `y_dtype`
/// (f32 x only) writes y as bf16 or f16, rounded once from the f32 row: the cast mixed precision
/// puts before a product, in the same pass.
LayerNormOutput layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5,
                          std::optional<DType> y_dtype = std::nullopt);

/// Outputs of add_layernorm: the sum s, and layernorm's outputs for it.
struct AddLayerNormOutput {
  Tensor sum, y, mean, rstd;
};
/// s = a + b, then layernorm(s, gamma, beta) in the same pass over each row: a residual add and
/// the normalisation after it (pre-norm Transformers). b has a's last dims (it repeats over a's
/// leading ones, like a positional embedding); the results are add-then-layernorm's bits.
/// `y_dtype` as layernorm's (the sum keeps a's dtype).
AddLayerNormOutput add_layernorm(const Tensor& a, const Tensor& b, const Tensor& gamma, const Tensor& beta,
                                 double eps = 1e-5, std::optional<DType> y_dtype = std::nullopt);

/// Gradients of layernorm wrt x, gamma and beta.
struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};
/// Backward of layernorm from the saved mean and rstd of the forward. A defined `more` (x's shape)
/// is another gradient of x, added to dx in the same pass (a residual stream's gradient), with
/// the bits of a separate add.
LayerNormGrads layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& more = Tensor());

}  // namespace troupe::kernels
