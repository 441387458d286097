#pragma once
// Mixed precision (AMP): which parts of a graph run in bf16 or f16. Levels as apex and MindSpore
// name them; this version has O0 and O1.
//   O0  f32 everywhere.
//   O1  autocast: the ops whose definition lists autocast_inputs (matmul, matmul_bias) get those
//       inputs cast to the low dtype and write their result in f32 from the f32 accumulator;
//       everything else (losses, softmax, layernorm, reductions, the optimizer) runs in f32 as
//       traced. A value is cast once however many products read it, and the actor runtime casts
//       a parameter once per step, not once per micro-batch.
// bf16 has f32's exponent range and needs no loss scaling; f16 products need a CPU with AVX512-FP16.

#include <string>
#include <string_view>

#include "troupe/graph/graph.hpp"

namespace troupe::graph {

/// A mixed-precision level.
enum class AmpLevel { O0, O1 };

/// The mixed precision a training or inference program runs at.
struct AmpOptions {
  AmpLevel level = AmpLevel::O0;
  DType dtype = DType::bf16;  // the low-precision type: bf16 or f16
};

/// "O0" or "O1" (what --amp takes); anything else is an invalid_argument Error listing them.
AmpLevel parse_amp_level(std::string_view name);
/// "O0" or "O1".
const char* to_string(AmpLevel level);
/// "bf16" or "fp16" (also "f16"; what --amp-dtype takes); anything else is an Error listing them.
DType parse_amp_dtype(std::string_view name);

/// The O1 rewrite of `g` (see the file comment) with `low` (bf16 or f16) as the low-precision type:
/// each autocast input that is f32 goes through one cast per value; f64 graphs (gradient checks)
/// and backward nodes stay as they are. The signature and every value's dtype but the casts' stay.
Graph autocast(const Graph& g, DType low);

}  // namespace troupe::graph
