#!/usr/bin/env bash
# Builds the runtime tests with ThreadSanitizer into build-tsan/ and runs them (suppressions for
# Debian's uninstrumented CAF library: tests/tsan.supp). Exits non-zero on any report.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -DTROUPE_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_BENCH=OFF >/dev/null
cmake --build build-tsan -j"$(nproc)" --target test_runtime test_micro_batches test_tracer test_data_parallel test_collectives
for t in test_runtime test_micro_batches test_tracer test_data_parallel test_collectives; do
  TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" build-tsan/tests/$t
done
