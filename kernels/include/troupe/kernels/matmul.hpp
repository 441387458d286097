#pragma once
// Matrix products through BLAS: f32 / f64 via OpenBLAS sgemm / dgemm, bf16 (f32 accumulate) via oneDNN.

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// op(a) @ op(b), where op transposes the last two dims when asked.
/// a: [..., M, K] (or [..., K, M] with trans_a), b: [..., K, N] (or [..., N, K] with trans_b).
/// Leading (batch) dims broadcast; rank-2 operands are plain GEMM. f32, f64 or bf16 inputs (both the
/// same); the result has the input dtype. Transposed views are passed to BLAS without copies.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace troupe::kernels
