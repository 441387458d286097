#!/usr/bin/env bash
# Builds the runtime and transport tests (actors, grouped ops, micro-batches, step memory, tracer, data parallel,
# tensor parallel, ZeRO-1, the planner, the library's parallel training and pipelines on virtual devices, the
# public API, the decoder's actor-program steps, troupe-serve, collectives, UCX) with ThreadSanitizer
# into build-tsan/ and runs them; suppressions for Debian's uninstrumented CAF and UCX libraries
# are in tests/tsan.supp. Exits non-zero on any report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# UCX's memory hooks patch libc's madvise, which glibc calls as a thread exits, after TSan has torn
# down that thread's state: every UCX binary then crashes at its first thread exit. Without memory
# events UCX registers memory per transfer instead of caching registrations, which is slower but
# equally correct, so they are switched off here. The build needs it too: ctest's test discovery
# runs each binary after linking it.
export UCX_MEM_EVENTS=no
cmake -S . -B build-tsan -DTROUPE_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_BENCH=OFF >/dev/null
cmake --build build-tsan -j"$(nproc)" --target test_parallel_kernels test_stream test_runtime test_streams test_op_grouping test_micro_batches test_step_memory test_tracer test_data_parallel test_grad_compression test_tensor_parallel test_zero test_zero_shard test_planning test_parallel_training test_pipeline_parallel test_loss_scaling test_public_api test_gpt_decoder test_serve_http test_serve test_collectives test_ucx
for t in test_parallel_kernels test_stream test_runtime test_streams test_op_grouping test_micro_batches test_step_memory test_tracer test_data_parallel test_grad_compression test_tensor_parallel test_zero test_zero_shard test_planning test_parallel_training test_pipeline_parallel test_loss_scaling test_public_api test_gpt_decoder test_serve_http test_serve test_collectives test_ucx; do
  TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" build-tsan/tests/$t
done
