#pragma once
// Fused, numerically stable softmax cross-entropy and its backward.

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Mean over N of -log_softmax(logits)[n, targets[n]]; logits [N, C] f32, f64, bf16 or f16, targets
/// [N] i32/i64; 0-d result in accumulation_dtype(logits) (f32 for bf16 and f16 logits).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);
/// dlogits = (softmax(logits) - onehot(targets)) * grad_loss / N; grad_loss is 0-d, in the
/// loss's dtype; dlogits in the dtype of logits.
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets);

}  // namespace troupe::kernels
