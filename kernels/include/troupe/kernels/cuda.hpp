#pragma once
// Whether this build has the CUDA backend and how many devices the machine shows.

namespace troupe {

/// True when the CUDA kernels were compiled into this build.
bool cuda_built();
/// Number of usable CUDA devices (0 without CUDA, without a driver or without a GPU).
int cuda_device_count();

}  // namespace troupe
