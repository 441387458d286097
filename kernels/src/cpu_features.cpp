// The host CPU's native low-precision support, from oneDNN's view of it and the CPU's feature bits.
#include "troupe/kernels/cpu_features.hpp"

#include <cstring>

#include "cpu/dnnl_matmul.hpp"

namespace troupe::kernels {

namespace {
bool dnnl_has_f16() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("avx512fp16")) return false;
#endif
  return cpu::dnnl_has_matmul(dnnl::memory::data_type::f16);
}
}  // namespace

const char* cpu_isa() { return cpu::dnnl_isa_name(); }

bool native_low_precision(DType dtype) {
  switch (dtype) {
    case DType::bf16: return std::strcmp(cpu_isa(), "amx") == 0 || std::strcmp(cpu_isa(), "avx512_bf16") == 0;
    case DType::f16: {
      // The CPU's AVX512-FP16 bits are not enough: the oneDNN version must have the products too.
      static const bool has = dnnl_has_f16();
      return has;
    }
    default: return false;
  }
}

}  // namespace troupe::kernels
