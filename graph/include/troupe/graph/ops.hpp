#pragma once
// The builder API: one function per op, reading like the math (`gelu(matmul(x, w) + b)`). Each
// runs eagerly on tensors or appends a node while tracing; see var.hpp. Shapes and dtypes are
// checked when the op is built, with errors naming the op and the shapes involved. Each builder is
// defined next to its op's definition and gradient, in its family's file: graph/src/ops/
// elementwise.cpp, matmul.cpp, reduce.cpp, shape.cpp, softmax.cpp, norm.cpp, embedding.cpp,
// loss.cpp, conv.cpp, attention.cpp.

#include <cstdint>
#include <optional>
#include <vector>

#include "troupe/graph/var.hpp"

namespace troupe::graph {

/// Elementwise a + b, a - b, a * b, a / b with NumPy broadcasting (ops/elementwise.cpp).
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);
/// Operators for the above, and with a scalar on either side.
Var operator+(const Var& a, const Var& b);
Var operator-(const Var& a, const Var& b);
Var operator*(const Var& a, const Var& b);
Var operator/(const Var& a, const Var& b);
Var operator+(const Var& a, double s);
Var operator-(const Var& a, double s);
Var operator*(const Var& a, double s);
Var operator/(const Var& a, double s);
Var operator+(double s, const Var& a);
Var operator-(double s, const Var& a);
Var operator*(double s, const Var& a);
Var operator-(const Var& a);

/// Elementwise functions (gelu is the tanh form).
Var neg(const Var& x);
Var exp(const Var& x);
Var log(const Var& x);
Var tanh(const Var& x);
Var sqrt(const Var& x);
Var rsqrt(const Var& x);
Var relu(const Var& x);
Var gelu(const Var& x);
Var silu(const Var& x);
/// gelu(h + b) for a bias b of shape [h's last dim], in one pass that never stores the sum; equal
/// to gelu(h + b) bit for bit (what level 3 fuses a Linear layer's bias and gelu into).
Var bias_gelu(const Var& h, const Var& b);
/// The gradient of (leaky) relu: grad where x > 0, negative_slope * grad elsewhere.
Var relu_backward(const Var& grad, const Var& x, double negative_slope = 0.0);

/// Matrix product over the last two dims, batch dims broadcast; optional transposes of a and b
/// (ops/matmul.cpp).
/// The result has the operands' dtype, or `out_dtype`: f32 for bf16 or f16 operands (written from
/// the f32 accumulator, as mixed precision runs its products).
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false,
           std::optional<DType> out_dtype = std::nullopt);
/// matmul(a, b) + bias, bias over the last dim, in one GEMM that accumulates onto the bias (level 3
/// fuses a Linear layer's product and bias into it), the bias in the result's dtype. Gradients as
/// the unfused pair's.
Var matmul_bias(const Var& a, const Var& b, const Var& bias, bool trans_a = false, bool trans_b = false,
                std::optional<DType> out_dtype = std::nullopt);

/// Reductions over `axes` (empty = all) (ops/reduce.cpp).
Var sum(const Var& x, const std::vector<std::int64_t>& axes = {}, bool keepdim = false);
Var mean(const Var& x, const std::vector<std::int64_t>& axes = {}, bool keepdim = false);
Var max(const Var& x, const std::vector<std::int64_t>& axes = {}, bool keepdim = false);
/// sum(x * x) as a 0-d value, accumulated in double (gradient norms, L2 penalties).
Var squared_norm(const Var& x);
/// Sums broadcast dims of x away so the result has the shape of `like` (gradient of broadcasting).
Var sum_to(const Var& x, const Var& like);
/// Broadcasts x to the shape of `like` (a view).
Var broadcast_to(const Var& x, const Var& like);

/// Reshape (one dim may be -1), transpose, permute; views when the layout allows (ops/shape.cpp).
Var reshape(const Var& x, const SymShape& shape);
Var transpose(const Var& x, std::int64_t a, std::int64_t b);
Var permute(const Var& x, const std::vector<std::int64_t>& dims);
/// Joins along `axis`; splits into pieces of `sizes` along `axis`.
Var concat(const std::vector<Var>& xs, std::int64_t axis);
std::vector<Var> split(const Var& x, const std::vector<std::int64_t>& sizes, std::int64_t axis);
/// [N, C*r*r, H, W] -> [N, C, H*r, W*r] and back.
Var pixel_shuffle(const Var& x, std::int64_t r);
Var pixel_unshuffle(const Var& x, std::int64_t r);
/// Converts the element type; x itself when it already has `dtype`.
Var cast(const Var& x, DType dtype);
/// The same values; no gradient flows back through it (detach).
Var stop_gradient(const Var& x);
/// Zeros of x's shape and dtype.
Var zeros_like(const Var& x);

/// Softmax / log-softmax along `axis` (ops/softmax.cpp; the rest of this list: ops/norm.cpp,
/// embedding.cpp, loss.cpp, conv.cpp, attention.cpp).
Var softmax(const Var& x, std::int64_t axis = -1);
Var log_softmax(const Var& x, std::int64_t axis = -1);
/// softmax(causal_mask(scale * x)) over the last dim of [..., T, T] attention scores, in one pass
/// (level 3 fuses the chain into it where attention fusion does not apply).
Var causal_softmax(const Var& x, double scale);
/// Layer normalisation over the last dim with gain and bias of shape [D].
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps = 1e-5);
/// The sum of a residual add and its layer norm, computed together by add_layer_norm.
struct AddLayerNorm {
  Var sum, y;
};
/// sum = a + b and y = layer_norm(sum, gamma, beta) in one pass; b is made of a's last dims
/// (repeated over its leading ones). Level 3 fuses an add followed by a layer norm into it.
AddLayerNorm add_layer_norm(const Var& a, const Var& b, const Var& gamma, const Var& beta, double eps = 1e-5);
/// Rows of weight[V, D] picked by integer ids (any shape): result ids.shape + [D].
Var embedding(const Var& weight, const Var& ids);
/// Mean cross-entropy of logits[..., C] against integer targets[...] (0-d result).
Var cross_entropy(const Var& logits, const Var& targets);
/// Mean squared error (0-d result).
Var mse_loss(const Var& y, const Var& target);
/// NCHW convolution with stride and zero padding; bias [O].
Var conv2d(const Var& x, const Var& w, const Var& bias, std::int64_t stride = 1, std::int64_t padding = 0);
/// The same without bias.
Var conv2d(const Var& x, const Var& w, std::int64_t stride = 1, std::int64_t padding = 0);
/// Keeps x[..., i, j] for j <= i and puts -inf above the diagonal (causal attention scores).
Var causal_mask(const Var& x);
/// softmax(causal_mask(scale * q k^T)) v for q, k, v [..., T, D] in one fused kernel that never
/// holds the T x T scores (FlashAttention's tiling and online softmax); differentiable.
Var causal_attention(const Var& q, const Var& k, const Var& v, double scale);
/// causal_attention with dropout of probability `dropout` on its probabilities at the site `name`
/// (graph/dropout.hpp): what dropout(softmax(...), dropout, name) before the product with v draws.
Var causal_attention(const Var& q, const Var& k, const Var& v, double scale, double dropout, const std::string& name);

}  // namespace troupe::graph
