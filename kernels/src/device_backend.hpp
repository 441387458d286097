#pragma once
// What tensors need from a device backend beyond the host: its allocator, byte copies across
// devices and element copies on a device. Defined by the CUDA backend when it is built, and by
// cpu_only_backend.cpp otherwise.

#include <cstddef>

#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::detail {

/// The allocator of CUDA device `index`; throws when CUDA is not built or the device is absent.
Allocator& cuda_allocator(int index);
/// Copies `bytes` dense bytes between any two devices (at least one of them a CUDA device).
void copy_bytes_between_devices(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                                std::size_t bytes);
/// dst = src broadcast to dst's shape and converted to dst's dtype, both on one CUDA device, any
/// strides (on the thread's launch stream).
void copy_elements_on_device(const Tensor& dst, const Tensor& src);

}  // namespace troupe::detail
