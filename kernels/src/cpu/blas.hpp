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

#include "troupe/kernels/threading.hpp"

extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace troupe::cpu {

/// Below this many multiply-adds a GEMM runs on one thread: starting a team costs more than it
/// saves (attention's 64x64x64 tiles ran 10% slower on two threads). OpenBLAS's own cut-off.
inline constexpr long long kParallelGemmMacs = 1LL << 18;

/// C = alpha * op(A) op(B) + beta * C in row-major layout, with oneDNN's sgemm on
/// kernel_threads() OpenMP threads (set per calling thread: an actor's scheduler thread would
/// otherwise start a team of all cores), one thread for a small product.
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  const bool small = static_cast<long long>(m) * n * k <= kParallelGemmMacs;
  if (omp_set_num_threads) omp_set_num_threads(small ? 1 : kernel_threads());
  dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// C = alpha * op(A) op(B) + beta * C in row-major layout, with cblas_dgemm.
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace troupe::cpu
