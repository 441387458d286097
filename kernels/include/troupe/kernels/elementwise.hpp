#pragma once
// Elementwise ops: binary arithmetic with NumPy broadcasting, scalar forms, activations and math
// functions, and the backward of each (computed from the forward input x).

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// The elementwise ops, one line each: the enums, their names, the chain's steps
/// (elementwise_chain.hpp), the kernels' registrations and the graph's ops are made from these
/// lists. The binary arithmetic ops: "<op>" (a op b, broadcast) and "<op>_scalar" (a op s).
#define TROUPE_BINARY_OPS(X) X(add) X(sub) X(mul) X(div)
/// The unary functions whose backward is grad * f'(x) ("<op>_backward"); gelu is the tanh
/// approximation. A new one is a line here, its f and f' in cpu/elementwise.cpp, and one
/// TROUPE_DEFINE_UNARY line in graph/src/ops/elementwise.cpp (docs/GRAPH.md, "How to add an op").
#define TROUPE_SMOOTH_UNARY_OPS(X) X(gelu) X(silu) X(exp) X(log) X(tanh) X(sqrt) X(rsqrt) X(neg)
/// Every unary function: relu's backward takes a negative slope (relu_backward, the custom-gradient path).
#define TROUPE_UNARY_OPS(X) X(relu) TROUPE_SMOOTH_UNARY_OPS(X)

#define TROUPE_ENUMERATOR(op) op,
/// The binary arithmetic ops.
enum class BinaryOp { TROUPE_BINARY_OPS(TROUPE_ENUMERATOR) };
/// The unary functions.
enum class UnaryOp { TROUPE_UNARY_OPS(TROUPE_ENUMERATOR) };
#undef TROUPE_ENUMERATOR

/// Name of a binary op ("add", ...), as registered in the kernel registry.
const char* to_string(BinaryOp op);
/// Name of a unary op ("relu", ...), as registered; its backward is registered as "<name>_backward".
const char* to_string(UnaryOp op);

/// a (op) b with broadcasting; both f32, f64, bf16 or f16 (bf16 and f16 compute in f32 and round
/// once), on the same device. The same dtypes for every front end below.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
/// Writes a (op) b into `out`, which has the broadcast shape and a's dtype and may be a or b
/// itself (elementwise, so an in-place update reads each element before writing it).
void binary_into(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
/// a (op) s for a scalar s (rounded to the dtype of a).
Tensor binary(BinaryOp op, const Tensor& a, double s);
/// Elementwise a + b (broadcasting).
inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b); }
/// Elementwise a - b (broadcasting).
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b); }
/// Elementwise a * b (broadcasting).
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b); }
/// Elementwise a / b (broadcasting).
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::div, a, b); }
/// a + s.
inline Tensor add(const Tensor& a, double s) { return binary(BinaryOp::add, a, s); }
/// a - s.
inline Tensor sub(const Tensor& a, double s) { return binary(BinaryOp::sub, a, s); }
/// a * s.
inline Tensor mul(const Tensor& a, double s) { return binary(BinaryOp::mul, a, s); }
/// a / s.
inline Tensor div(const Tensor& a, double s) { return binary(BinaryOp::div, a, s); }

/// f(x) elementwise.
Tensor unary(UnaryOp op, const Tensor& x);
/// grad * f'(x) elementwise: the backward of unary(op, x).
Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x);
/// Backward of relu with a slope for x <= 0: grad where x > 0, negative_slope * grad elsewhere.
/// negative_slope = 0 is the exact relu gradient; 0.01 is the custom ReLU gradient.
Tensor relu_backward(const Tensor& grad, const Tensor& x, double negative_slope = 0.0);

/// max(x, 0).
inline Tensor relu(const Tensor& x) { return unary(UnaryOp::relu, x); }
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline Tensor gelu(const Tensor& x) { return unary(UnaryOp::gelu, x); }
/// x * sigmoid(x).
inline Tensor silu(const Tensor& x) { return unary(UnaryOp::silu, x); }
/// e^x.
inline Tensor exp(const Tensor& x) { return unary(UnaryOp::exp, x); }
/// Natural logarithm.
inline Tensor log(const Tensor& x) { return unary(UnaryOp::log, x); }
/// Hyperbolic tangent.
inline Tensor tanh(const Tensor& x) { return unary(UnaryOp::tanh, x); }
/// Square root.
inline Tensor sqrt(const Tensor& x) { return unary(UnaryOp::sqrt, x); }
/// 1 / sqrt(x).
inline Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::rsqrt, x); }
/// -x.
inline Tensor neg(const Tensor& x) { return unary(UnaryOp::neg, x); }

}  // namespace troupe::kernels
