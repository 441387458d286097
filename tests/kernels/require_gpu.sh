#!/usr/bin/env bash
# TROUPE_REQUIRE_GPU=1 turns the GPU tests' skip into a failure (tests/gpu.hpp): on a machine without
# a device a GPU test skips plainly and fails when a GPU is required; with a device it passes both ways.
#   usage: require_gpu.sh TEST_CUDA_BINARY
set -uo pipefail
bin=$1
filter=--gtest_filter=Cuda.RoundTripCopy
plain=$("$bin" "$filter" 2>&1)
plain_rc=$?
required=$(TROUPE_REQUIRE_GPU=1 "$bin" "$filter" 2>&1)
required_rc=$?
if grep -q "no CUDA device" <<<"$plain"; then
  if ((plain_rc != 0)); then
    echo "require_gpu: without a device and without TROUPE_REQUIRE_GPU the test must skip, but it failed:"
    echo "$plain"
    exit 1
  fi
  if ((required_rc == 0)) || ! grep -q "TROUPE_REQUIRE_GPU=1, but this machine has no CUDA device" <<<"$required"; then
    echo "require_gpu: TROUPE_REQUIRE_GPU=1 on a machine without a device must fail the test, naming why:"
    echo "$required"
    exit 1
  fi
elif ((plain_rc != 0 || required_rc != 0)); then
  echo "require_gpu: with a device the test must pass:"
  echo "$plain"
  exit 1
fi
echo "require_gpu: ok"
