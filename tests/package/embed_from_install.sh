#!/usr/bin/env bash
# The installed package from a clean prefix: installs the build BUILD into a fresh folder, checks
# that nothing installed names the build or source tree, builds a copy of examples/embed against
# the prefix alone (find_package(Troupe) and Troupe::troupe, no source headers), and runs it.
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
