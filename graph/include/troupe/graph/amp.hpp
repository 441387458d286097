#pragma once
// Mixed precision (AMP): which parts of a graph run in bf16 or f16. Levels as apex and MindSpore
// name them.
//   O0  f32 everywhere.
//   O1  autocast: the ops whose definition lists autocast_inputs (matmul, matmul_bias, conv2d) get
//       those inputs cast to the low dtype and write their result in f32 from the f32 accumulator;
//       everything else (losses, softmax, layernorm, reductions, the optimizer) runs in f32 as
//       traced.
//   O2  activations stay low between ops: products write the low dtype; ops whose definition says
//       Precision::keeps_f32 (losses, softmax, normalisation, reductions, exp/log) or f32 take
//       their inputs back up to f32; every other op follows its activations (their weights, biases included, go down with
//       them; an f32 activation next to a low one, as in a residual add, takes the low one up).
//       Parameters stay f32 masters that the optimizer updates; the weights compute with are
//       their casts, made once per step; normalisation parameters stay f32.
//   O3  pure low precision, for inference and experiments: every op takes its floating inputs in
//       the low dtype, parameters included, but the few without low-precision kernels
//       (Precision::f32). Softmax, layer norm, attention and losses read and write the low dtype
//       and compute their rows in f32; layer-norm statistics, the attention's log-sum-exp and
//       losses are f32. Training at O3 takes no loss scaling.
// The policy is each op's definition (OpDef::autocast_inputs, OpDef::precision). At every level a
// value is cast once however many ops read it, and the actor runtime casts a parameter once per
// step, not once per micro-batch. bf16 has f32's exponent range and needs no loss scaling; f16
// products need a oneDNN with f16 matmul on the CPU.

#include <string>
#include <string_view>

#include "troupe/graph/graph.hpp"

namespace troupe::graph {

/// A mixed-precision level.
enum class AmpLevel { O0, O1, O2, O3 };

/// The mixed precision a training or inference program runs at.
struct AmpOptions {
  AmpLevel level = AmpLevel::O0;
  DType dtype = DType::bf16;  // the low-precision type: bf16 or f16
};

/// "O0", "O1", "O2" or "O3" (what --amp takes); anything else is an invalid_argument Error listing them.
AmpLevel parse_amp_level(std::string_view name);
/// "O0", "O1", "O2" or "O3".
const char* to_string(AmpLevel level);
/// "bf16" or "fp16" (also "f16"; what --amp-dtype takes); anything else is an Error listing them.
DType parse_amp_dtype(std::string_view name);

/// The rewrite of `g` for `level` (see the file comment) with `low` (bf16 or f16) as the
/// low-precision type. At O1 every value keeps its dtype (backward nodes and f64 graphs are left
/// alone); at O2 and O3 values change dtype, so it takes forward graphs only, and a graph output whose
/// dtype changed is cast back: the signature never changes.
Graph autocast(const Graph& g, DType low, AmpLevel level = AmpLevel::O1);

}  // namespace troupe::graph
