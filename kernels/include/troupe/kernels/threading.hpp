#pragma once
// How many threads one kernel call may use. Kernels other than GEMM are single-threaded: in the
// runtime, parallelism comes from actors running on several scheduler threads (see
// docs/PERFORMANCE.md for the measurement behind this choice).

namespace troupe {

/// Sets the threads a BLAS call (OpenBLAS and oneDNN) may use; n >= 1.
void set_kernel_threads(int n);
/// The current per-call BLAS thread count.
int kernel_threads();

}  // namespace troupe
