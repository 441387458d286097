#pragma once
// Row-major GEMM overloaded on the element type, so that the float-templated kernels (matmul,
// conv2d) reach cblas_sgemm for f32 and cblas_dgemm for f64 through one call.

#include <cblas.h>

namespace troupe::cpu {

/// C = alpha * op(A) op(B) + beta * C in row-major layout, with cblas_sgemm.
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// C = alpha * op(A) op(B) + beta * C in row-major layout, with cblas_dgemm.
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace troupe::cpu
