#pragma once
// What the host CPU computes natively: mixed precision asks before it lowers anything, since bf16
// or f16 emulated in f32 instructions is slower than f32 itself.

#include "troupe/kernels/dtype.hpp"

namespace troupe::kernels {

/// The widest instruction set oneDNN computes with on this CPU, in a word: "amx", "avx512_bf16"
/// (native bf16 dot products without AMX), or a set without native bf16 ("avx512", "avx2", ...).
/// Benchmark lines and the apps' start-up lines name it.
const char* cpu_isa();

/// True when this CPU computes products of `dtype` natively: bf16 with AVX512-BF16 or AMX, f16 with
/// AVX512-FP16 and a oneDNN that has f16 products (2.6 has none). False for every other dtype.
bool native_low_precision(DType dtype);

}  // namespace troupe::kernels
