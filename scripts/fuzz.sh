#!/usr/bin/env bash
# The long fuzz runs: every parser of outside bytes (safetensors, checkpoints, PNG images, corpora,
# the rendezvous handshake, strategy files, metrics files and traces) on RUNS mutated inputs each
# (default 1000000) under ASan+UBSan, built into build-asan/. Prints one JSON line per target; exits
# non-zero on a defect (an exception other than a one-line troupe::Error) or a sanitizer report.
# Usage: scripts/fuzz.sh [RUNS] [target ...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1000000}
shift || true
scripts/setup.sh
cmake -S . -B build-asan -DTROUPE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_BENCH=OFF >/dev/null
cmake --build build-asan -j"$(nproc)" --target troupe_fuzz
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The file targets write an input per run: a memory-backed folder when there is one.
scratch_root=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && scratch_root=/dev/shm
build-asan/tests/troupe_fuzz --runs "$runs" --seed "${FUZZ_SEED:-1}" --scratch "$scratch_root/troupe_fuzz.$$" "$@"
