#!/usr/bin/env bash
# Builds Troupe with AddressSanitizer and UndefinedBehaviorSanitizer (float-cast-overflow included)
# into build-asan/ and runs the whole test suite there; any report fails the test that caused it.
# Leak checking is off: Debian's CAF and UCX keep process-lifetime allocations.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build-asan -DTROUPE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_BENCH=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j"$(nproc)"
