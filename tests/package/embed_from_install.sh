#!/usr/bin/env bash
# The installed package from a clean prefix: installs the build BUILD into a fresh folder, checks
# that nothing installed names the build or source tree, builds copies of examples/embed and
# examples/parallel against the prefix alone (find_package(Troupe) and Troupe::troupe, no source
# headers), and runs them: the parallel one on four virtual devices, then as four processes under
# the installed troupe-launch.
#   usage: embed_from_install.sh BUILD SOURCE
set -euo pipefail
build=$(realpath "$1")
source=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/lib/cmake/Troupe/TroupeConfig.cmake"
test -f "$prefix/lib/cmake/Troupe/TroupeConfigVersion.cmake"
test -f "$prefix/include/troupe/troupe.hpp"
if grep -rl -e "$build" -e "$source" "$prefix/lib/cmake" "$prefix/include"; then
  echo "embed_from_install: the files above name the build or source tree" >&2
  exit 1
fi
if readelf -d "$prefix"/lib/libtroupe_*.so "$prefix"/bin/troupe-* | grep -E "R(UN)?PATH" | grep -e "$build" -e "$source"; then
  echo "embed_from_install: an installed binary searches the build or source tree for libraries" >&2
  exit 1
fi
"$prefix/bin/troupe-gpt" --version

cp -r "$source/examples/embed" "$work/embed"
cmake -S "$work/embed" -B "$work/embed-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/embed-build" -j"$(nproc)" >/dev/null
"$work/embed-build/troupe-embed-mlp" "$work/out"

cp -r "$source/examples/parallel" "$work/parallel"
cmake -S "$work/parallel" -B "$work/parallel-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/parallel-build" -j"$(nproc)" >/dev/null
"$work/parallel-build/troupe-parallel-gpt" 30
"$prefix/bin/troupe-launch" --timeout 60 -n 4 -- "$work/parallel-build/troupe-parallel-gpt" 30
