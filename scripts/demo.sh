#!/usr/bin/env bash
# Sets up the machine, builds Troupe and runs the main job (troupe-demo; arguments pass through,
# e.g. --trace out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
"${BUILD_DIR:-build}"/apps/troupe-demo "$@"
