#pragma once
// Softmax and log-softmax along one axis, and the causal softmax of attention scores, with their
// backward passes.

#include <cstdint>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Numerically stable softmax of `x` along `axis`.
Tensor softmax(const Tensor& x, std::int64_t axis = -1);
/// Numerically stable log-softmax of `x` along `axis`.
Tensor log_softmax(const Tensor& x, std::int64_t axis = -1);
/// Gradient wrt the input of softmax, given the output gradient and y = softmax(x).
Tensor softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t axis = -1);
/// Gradient wrt the input of log_softmax, given the output gradient and y = log_softmax(x).
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t axis = -1);

/// softmax(causal_mask(scale * x)) over the last dim of [..., T, T] attention scores in one pass:
/// query row i keeps keys j <= i. Computed in f32 for bf16 and f16 rows, rounded once.
Tensor causal_softmax(const Tensor& x, double scale);
/// Gradient wrt the scores of causal_softmax, given the output gradient and y = causal_softmax(x).
Tensor causal_softmax_backward(const Tensor& grad, const Tensor& y, double scale);

}  // namespace troupe::kernels
