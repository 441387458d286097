#pragma once
// Matrix products: f32 via oneDNN's sgemm, f64 via OpenBLAS dgemm, bf16 (f32 accumulate) via oneDNN
// (kernels/src/cpu/blas.hpp says why).

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// op(a) @ op(b), where op transposes the last two dims when asked.
/// a: [..., M, K] (or [..., K, M] with trans_a), b: [..., K, N] (or [..., N, K] with trans_b).
/// Leading (batch) dims broadcast; rank-2 operands are plain GEMM. f32, f64 or bf16 inputs (both the
/// same); the result has the input dtype. Transposed views are passed to BLAS without copies.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

/// op(a) @ op(b) + bias, bias [N] added to every row, as one GEMM accumulating onto the bias (a
/// Linear layer's epilogue); f32 or f64. Within rounding of matmul then add: the GEMM may add the
/// bias before the last of its K-blocks.
Tensor matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a = false, bool trans_b = false);

}  // namespace troupe::kernels
