#pragma once
// Mixed precision (AMP): which parts of a graph run in bf16 or f16. Levels as apex and MindSpore
// name them; this version has O0, O1 and O2.
//   O0  f32 everywhere.
//   O1  autocast: the ops whose definition lists autocast_inputs (matmul, matmul_bias, conv2d) get
//       those inputs cast to the low dtype and write their result in f32 from the f32 accumulator;
//       everything else (losses, softmax, layernorm, reductions, the optimizer) runs in f32 as
//       traced.
//   O2  activations stay low between ops: products write the low dtype; ops whose definition says
//       keeps_f32 (losses, softmax, normalisation, reductions, exp/log) take their inputs back up to
//       f32; every other op follows its activations (their weights, biases included, go down with
//       them; an f32 activation next to a low one, as in a residual add, takes the low one up).
//       Parameters stay f32 masters that the optimizer updates; the weights compute with are
//       their casts, made once per step; normalisation parameters stay f32.
// At every level a value is cast once however many ops read it, and the actor runtime casts a
// parameter once per step, not once per micro-batch.
// bf16 has f32's exponent range and needs no loss scaling; f16 products need a CPU with AVX512-FP16.

#include <string>
#include <string_view>

#include "troupe/graph/graph.hpp"

namespace troupe::graph {

/// A mixed-precision level.
enum class AmpLevel { O0, O1, O2 };

/// The mixed precision a training or inference program runs at.
struct AmpOptions {
  AmpLevel level = AmpLevel::O0;
  DType dtype = DType::bf16;  // the low-precision type: bf16 or f16
};

/// "O0", "O1" or "O2" (what --amp takes); anything else is an invalid_argument Error listing them.
AmpLevel parse_amp_level(std::string_view name);
/// "O0", "O1" or "O2".
const char* to_string(AmpLevel level);
/// "bf16" or "fp16" (also "f16"; what --amp-dtype takes); anything else is an Error listing them.
DType parse_amp_dtype(std::string_view name);

/// The rewrite of `g` for `level` (see the file comment) with `low` (bf16 or f16) as the
/// low-precision type. At O1 every value keeps its dtype (backward nodes and f64 graphs are left
/// alone); at O2 values change dtype, so it takes forward graphs only, and a graph output whose
/// dtype changed is cast back: the signature never changes.
Graph autocast(const Graph& g, DType low, AmpLevel level = AmpLevel::O1);

}  // namespace troupe::graph
