#pragma once
// Fused causal attention: softmax(causal_mask(scale * q k^T)) v in one kernel that never holds the
// T x T scores, and its backward from the saved log-sum-exp of each query row.

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// The outputs of causal_attention: y [..., T, D] and each query row's log-sum-exp [..., T] (f32
/// for bf16 and f16 inputs), which the backward reads instead of the probabilities.
struct AttentionResult {
  Tensor y, lse;
};

/// Causal attention of q, k, v [..., T, D] (the same shape and dtype: f32, f64, bf16 or f16): row i of y is the
/// softmax over keys j <= i of scale * q_i . k_j, applied to v.
AttentionResult causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale);

/// The gradients of causal_attention.
struct AttentionGrads {
  Tensor dq, dk, dv;
};

/// dq, dk, dv of causal_attention from the gradient of y, the inputs, y and lse.
AttentionGrads causal_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& y, const Tensor& lse, double scale);

}  // namespace troupe::kernels
