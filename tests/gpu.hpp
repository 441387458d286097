#pragma once
// How the GPU tests meet a machine without a device: they skip, saying so, unless
// TROUPE_REQUIRE_GPU=1 (scripts/gpu_check.sh sets it), where a missing device fails them, so that a
// run on a GPU machine can never pass by skipping everything.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "troupe/kernels/cuda.hpp"

namespace troupe::test {

/// Whether TROUPE_REQUIRE_GPU=1 asks the GPU tests to fail rather than skip without a device.
inline bool gpu_required() {
  const char* v = std::getenv("TROUPE_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace troupe::test

/// Skips the test on a machine without a CUDA device, or fails it there under TROUPE_REQUIRE_GPU=1.
#define TROUPE_REQUIRE_GPU()                                                                          \
  do {                                                                                                \
    if (::troupe::cuda_device_count() > 0) break;                                                     \
    if (::troupe::test::gpu_required()) FAIL() << "TROUPE_REQUIRE_GPU=1, but this machine has no CUDA device"; \
    GTEST_SKIP() << "no CUDA device (TROUPE_REQUIRE_GPU=1 makes this a failure)";                   \
  } while (0)
