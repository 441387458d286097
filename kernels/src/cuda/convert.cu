// Element copies on one CUDA device (as src/cpu/convert.cpp and Tensor::copy_from on the host):
// dst = src broadcast to dst's shape and converted to dst's dtype, either of them strided.
// contiguous(), to(dtype) and the views' copies of CUDA tensors come here. Launched on the thread's
// launch stream.
#include "cuda/element_types.cuh"
#include "cuda/strided.cuh"
#include "device_backend.hpp"

namespace troupe {

namespace {

template <class D, class S>
__global__ void copy_strided(cuda::Geometry<1> g, D* dst, const S* src, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x) {
    long long offsets[2];
    cuda::offsets_of(g, i, offsets);
    dst[offsets[0]] = cuda::convert<D>(src[offsets[1]]);
  }
}

template <class D, class S>
__global__ void copy_dense(D* dst, const S* src, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(blockDim.x) * gridDim.x)
    dst[i] = cuda::convert<D>(src[i]);
}

}  // namespace

namespace detail {

void copy_elements_on_device(const Tensor& dst, const Tensor& src) {
  const long long n = dst.numel();
  if (n == 0) return;
  const bool dense = dst.is_contiguous() && src.is_contiguous() && src.shape() == dst.shape();
  visit_dtype(dst.dtype(), [&](auto dtag) {
    visit_dtype(src.dtype(), [&](auto stag) {
      using D = cuda::DeviceType<decltype(dtag)>;
      using S = cuda::DeviceType<decltype(stag)>;
      auto* d = static_cast<D*>(dst.raw_data());
      const auto* s = static_cast<const S*>(src.raw_data());
      if (dense) {
        copy_dense<D, S><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::launch_stream()>>>(d, s, n);
      } else {
        const Tensor* operands[1] = {&src};
        copy_strided<D, S><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::launch_stream()>>>(
            cuda::geometry_of<1>("copy", dst, operands), d, s, n);
      }
    });
  });
  cuda::finish_launch("copy");
}

}  // namespace detail

}  // namespace troupe
