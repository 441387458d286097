#!/usr/bin/env bash
# Sets up the machine (Chromium too, for the browser tests of troupe-serve's and troupe-report's
# pages, so that only the GPU tests can skip), builds Troupe and runs the whole test suite; exits
# non-zero if any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --browser
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)"
