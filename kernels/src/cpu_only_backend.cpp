// The device backend of a build without CUDA: every CUDA request is a clear "unsupported" error.
#include "device_backend.hpp"
#include "troupe/kernels/cuda.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/stream.hpp"

namespace troupe {

namespace detail {

Allocator& cuda_allocator(int index) {
  fail(ErrorKind::unsupported, "cuda:", index,
       " requested, but this Troupe build has no CUDA support; reconfigure with a CUDA toolkit and -DTROUPE_CUDA=ON");
}

void copy_bytes_between_devices(void*, const Device& dst_device, const void*, const Device& src_device, std::size_t) {
  fail(ErrorKind::unsupported, "copy from ", src_device.str(), " to ", dst_device.str(),
       ": this Troupe build has no CUDA support");
}

void copy_elements_on_device(const Tensor& dst, const Tensor&) {
  fail(ErrorKind::unsupported, "copy on ", dst.device().str(), ": this Troupe build has no CUDA support");
}

}  // namespace detail

std::shared_ptr<Stream> make_cuda_stream(int index, std::string) {
  fail(ErrorKind::unsupported, "a stream on cuda:", index,
       " requested, but this Troupe build has no CUDA support; reconfigure with a CUDA toolkit and -DTROUPE_CUDA=ON");
}

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }

}  // namespace troupe
