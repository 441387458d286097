#pragma once
// Fused causal attention: softmax(causal_mask(scale * q k^T)) v in one kernel that never holds the
// T x T scores, and its backward from the saved log-sum-exp of each query row.

#include "troupe/kernels/dropout.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Dropout on the attention probabilities, inside the fused kernel: the decisions dropout_mask
/// takes for the probabilities [B, H, T, T] of q [B, H, T, D] (or [N, T, T] of q [N, T, D]; a
/// tensor-parallel shard of the latter is split along N only), so
/// that the fused and the unfused attention drop the same elements. The softmax's sums are the
/// undropped ones; the backward recomputes the same decisions.
struct AttentionDropout {
  double p = 0;                   // 0: none
  std::uint64_t site = 0;         // the dropout site (dropout_mask's)
  RandomPosition at;              // the run's position
  std::int64_t row_offset = 0;    // a shard's place in the whole batch (dim 0) ...
  std::int64_t column_offset = 0; // ... and heads (dim 1)
};

/// The outputs of causal_attention: y [..., T, D] and each query row's log-sum-exp [..., T] (f32
/// for bf16 and f16 inputs), which the backward reads instead of the probabilities.
struct AttentionResult {
  Tensor y, lse;
};

/// Causal attention of q, k, v [..., T, D] (the same shape and dtype: f32, f64, bf16 or f16): row i of y is the
/// softmax over keys j <= i of scale * q_i . k_j, applied to v.
AttentionResult causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                 const AttentionDropout& dropout = {});

/// The gradients of causal_attention.
struct AttentionGrads {
  Tensor dq, dk, dv;
};

/// dq, dk, dv of causal_attention from the gradient of y, the inputs, y and lse (and the forward's dropout).
AttentionGrads causal_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& y, const Tensor& lse, double scale,
                                         const AttentionDropout& dropout = {});

}  // namespace troupe::kernels
