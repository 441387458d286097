#include "cpu/dnnl_common.hpp"

#include "troupe/kernels/threading.hpp"

extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace troupe::cpu {

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    default: return dnnl::memory::data_type::f32;
  }
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

int limit_threads_here(long long macs) {
  const int threads = macs >= 0 && macs <= kParallelGemmMacs ? 1 : kernel_threads();
  if (omp_set_num_threads) omp_set_num_threads(threads);
  return threads;
}

dnnl::memory CallBuffers::make(const dnnl::memory::desc& md) {
  held_.push_back(std::make_shared<Storage>(md.get_size(), Device::cpu()));
  return dnnl::memory(md, cpu_engine(), held_.back()->data());
}

dnnl::primitive_attr user_scratchpad_attributes() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace troupe::cpu
