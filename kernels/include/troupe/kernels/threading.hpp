#pragma once
// How many cores kernel calls may use. Two settings: the BLAS libraries' threads per product or
// convolution (OpenBLAS and oneDNN), and the cores of the pool that the other kernels (elementwise
// and chain, reductions, norms, softmax, cross-entropy, casts, AdamW, fused attention) split their
// tiles over, taking only cores no other kernel call is using (docs/PERFORMANCE.md, "One pool of
// cores").

namespace troupe {

/// Sets the threads a BLAS call (OpenBLAS and oneDNN) may use; n >= 1.
void set_kernel_threads(int n);
/// The current per-call BLAS thread count.
int kernel_threads();

/// Sets the cores the pool's kernels may use at once, callers included; n >= 1 (1: every kernel
/// runs on its caller's thread alone).
void set_parallel_cores(int n);
/// The pool's cores: set_parallel_cores's count, by default the cores this process may run on.
int parallel_cores();

/// Called on a pool helper's thread when it starts (true) and stops (false) running a kernel
/// call's tiles: how a tracer sees the cores the helpers add to a kernel. Null: nobody is told.
using PoolObserver = void (*)(bool starts);
/// Sets the pool's observer (one per process; null removes it).
void set_pool_observer(PoolObserver observer);

}  // namespace troupe
