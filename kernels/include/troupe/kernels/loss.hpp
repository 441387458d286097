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

// Megatron's vocab-parallel cross-entropy: each device holds columns [first, first + C_l) of the
// logits [N, C] and never the whole rows. With each row's maximum over all devices (`max` [N], in
// the logits' dtype), a device's parts of the rows add up over the devices to the loss's terms.

/// This device's parts of each row, f64 [N, 2]: sum(exp(logits - max)) over its columns, and the
/// target's logit minus the maximum where it holds the target (0 elsewhere); targets in [0, classes).
Tensor cross_entropy_parts(const Tensor& logits, const Tensor& targets, const Tensor& max, std::int64_t first,
                           std::int64_t classes);
/// The loss from the parts summed over the devices: the mean over N of log(sum) - (target - max),
/// 0-d in `dtype` (the loss's: accumulation_dtype of the logits).
Tensor cross_entropy_from_parts(const Tensor& parts, DType dtype);
/// The gradient of this device's columns: (exp(logits - max) / sum - onehot(targets - first)) *
/// grad_loss / N, with the parts summed over the devices; targets in [0, classes).
Tensor cross_entropy_parts_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& max,
                                    const Tensor& parts, std::int64_t first, std::int64_t classes);

}  // namespace troupe::kernels
