#!/usr/bin/env bash
# Sets up the machine, builds Troupe and runs the main job (for now: the kernels demo).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
"${BUILD_DIR:-build}"/apps/troupe-demo
