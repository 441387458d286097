#pragma once
// A fused chain of elementwise ops: one pass over the output, tile by tile, each step computed into
// a small buffer that stays in cache, so the chain's intermediate tensors are never stored. Level 3
// fuses chains of elementwise graph nodes into it (graph op elementwise_chain).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/registry.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

#define TROUPE_CHAIN_ENUMERATOR(op) op,
#define TROUPE_CHAIN_BACKWARD_ENUMERATOR(op) op##_backward,
/// The ops a chain can take as steps; each is the elementwise kernel of the same name: the binary
/// ops, their scalar forms, the unary functions and their backwards (elementwise.hpp's lists).
enum class ChainOp : std::int64_t {
  TROUPE_BINARY_OPS(TROUPE_CHAIN_ENUMERATOR) add_scalar, mul_scalar,
  TROUPE_UNARY_OPS(TROUPE_CHAIN_ENUMERATOR)
  TROUPE_UNARY_OPS(TROUPE_CHAIN_BACKWARD_ENUMERATOR)
  bias_gelu,
};
#undef TROUPE_CHAIN_ENUMERATOR
#undef TROUPE_CHAIN_BACKWARD_ENUMERATOR

/// One step: `op` applied to operands a and b (b = -1 for a one-operand op). Operand k below the
/// chain's input count is input k; operand inputs + j is the result of step j (an earlier step).
/// `value` is add_scalar's and mul_scalar's scalar and relu_backward's negative slope.
struct ChainStep {
  ChainOp op;
  int a, b;
  double value;
};

/// Most inputs and steps one chain holds (the kernel keeps a tile for each).
constexpr std::size_t kMaxChainInputs = 4, kMaxChainSteps = 16;

/// The op's name, which is also its kernel's and its graph op's.
const char* to_string(ChainOp op);
/// The chain op called `name`, if there is one.
std::optional<ChainOp> chain_op(const std::string& name);
/// How many operands the op reads (1 or 2).
int chain_op_arity(ChainOp op);
/// True when the op reads ChainStep::value.
bool chain_op_has_value(ChainOp op);

/// The steps as node attributes: "ops" (codes), "args" (two per step) and "value<j>" for step j
/// where the op reads a value.
Attrs chain_attrs(const std::vector<ChainStep>& steps);
/// The steps that attributes hold, for a chain of `inputs` inputs; a malformed program (unknown op,
/// an operand out of range or not yet computed, too many steps) is an invalid_argument Error.
std::vector<ChainStep> chain_steps(const Attrs& attrs, std::size_t inputs);

/// Runs the chain over its inputs, broadcast together (f32 or f64, one dtype): the last step's
/// result. Each step rounds as its own kernel does, so dense inputs give the unfused ops' bits.
Tensor elementwise_chain(const std::vector<Tensor>& inputs, const std::vector<ChainStep>& steps);

}  // namespace troupe::kernels
