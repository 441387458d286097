#pragma once
// Row-major GEMM overloaded on the element type, so that the float-templated kernels (matmul,
// conv2d, attention tiles) reach one backend per type through one call: f32 on oneDNN's sgemm,
// f64 on OpenBLAS's dgemm (oneDNN has none; f64 is for references and gradient checks).
//
// Why oneDNN for f32: it matches or beats OpenBLAS in every shape class measured (docs/PERFORMANCE.md,
// `matmul` lines; level on gpt-mini's steps), and it runs on the same OpenMP threads as oneDNN's
// convolutions. With OpenBLAS's own pthreads next to OpenMP's, each library's idle threads spin
// while the other computes: on two cores a GEMM after a convolution ran at 1-10 GFLOP/s.

#include <cblas.h>
#include <dnnl.h>

#include "cpu/dnnl_common.hpp"

namespace troupe::cpu {

/// C = alpha * op(A) op(B) + beta * C in row-major layout, with oneDNN's sgemm on
/// kernel_threads() OpenMP threads (set per calling thread: an actor's scheduler thread would
/// otherwise start a team of all cores), one thread for a small product.
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  limit_threads_here(static_cast<long long>(m) * n * k);
  dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// C = alpha * op(A) op(B) + beta * C in row-major layout, with cblas_dgemm.
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace troupe::cpu
