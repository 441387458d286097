#pragma once
// Low-precision matrix products through oneDNN's matmul primitive: bf16 (or f16) operands with f32
// accumulation, written as f32 or in the operands' type, on AMX tiles where the CPU has them, else
// AVX512-BF16. The operands go in on their own strides (transposes and row-strided views are not
// copied), and each thread keeps the primitives it built, so a step of known shapes builds none.

#include <cstdint>

#include <dnnl.hpp>

namespace troupe::cpu {

/// One operand of a product as oneDNN reads it: [batch, rows, cols] with strides in elements. A
/// batch of 1 broadcasts across the other operand's batch.
struct MatmulOperand {
  void* data = nullptr;
  dnnl::memory::data_type type = dnnl::memory::data_type::f32;
  std::int64_t dims[3] = {1, 0, 0};
  std::int64_t strides[3] = {0, 0, 1};
};

/// c = a @ b, plus `bias` ([1, 1, n], may be null) on every row, accumulated in f32. Throws an
/// `unsupported` troupe::Error naming the types, oneDNN's version and the CPU's ISA when oneDNN has
/// no implementation (f16 in oneDNN 2.6, on any CPU).
void dnnl_matmul(const MatmulOperand& a, const MatmulOperand& b, const MatmulOperand* bias, const MatmulOperand& c);

/// True when oneDNN has a product of `type` operands written as f32 on this CPU.
bool dnnl_has_matmul(dnnl::memory::data_type type);

/// The widest instruction set oneDNN uses on this CPU, in a word: "amx", "avx512_bf16" (native bf16
/// dot products without AMX) or the name of a set without native bf16.
const char* dnnl_isa_name();

}  // namespace troupe::cpu
