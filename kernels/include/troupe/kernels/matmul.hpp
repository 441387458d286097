#pragma once
// Matrix products: f32 via oneDNN's sgemm, f64 via OpenBLAS dgemm, bf16 and f16 (f32 accumulate)
// via oneDNN's matmul primitive (kernels/src/cpu/blas.hpp says why).

#include <optional>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// The dtype of a product of `operands` asked to be written as `out` (nullopt: the operands'):
/// bf16 and f16 products may be written as f32; anything else is a dtype_mismatch error naming `op`.
DType product_dtype(const char* op, DType operands, std::optional<DType> out);

/// op(a) @ op(b), where op transposes the last two dims when asked.
/// a: [..., M, K] (or [..., K, M] with trans_a), b: [..., K, N] (or [..., N, K] with trans_b).
/// Leading (batch) dims broadcast; rank-2 operands are plain GEMM. f32, f64, bf16 or f16 inputs (both
/// the same); the result has the input dtype, or `out_dtype` (f32 for bf16 and f16 operands: the
/// f32 accumulator written as it is). Transposed views are passed to the GEMM without copies. f16
/// needs a CPU with AVX512-FP16 (an `unsupported` error otherwise).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              std::optional<DType> out_dtype = std::nullopt);

/// op(a) @ op(b) + bias, bias [N] added to every row, as one GEMM accumulating onto the bias (a
/// Linear layer's epilogue); dtypes as matmul, the bias in the result's dtype. Within rounding of
/// matmul then add: the GEMM may add the bias before the last of its K-blocks.
Tensor matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a = false, bool trans_b = false,
                   std::optional<DType> out_dtype = std::nullopt);

}  // namespace troupe::kernels
