#pragma once
// Checks and small pieces shared by the op definitions: arity and dtype checks that produce
// errors naming the op and its input shapes, and small pieces of gradient rules.

#include <string>
#include <vector>

#include "troupe/graph/op_def.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph::detail {

/// "f32[batch, 128], f32[128, 256]": the inputs of a node as errors show them.
std::string inputs_str(const InferContext& c);
/// Throws a shape_mismatch Error: "<op>: inputs <...>: <why>".
[[noreturn]] void shape_error(const InferContext& c, const std::string& why);
/// Checks the number of inputs is within [lo, hi].
void expect_arity(const InferContext& c, std::size_t lo, std::size_t hi);
/// Checks input i is floating point.
void expect_floating(const InferContext& c, std::size_t i);
/// Checks input i is an integer type (ids, targets).
void expect_integer(const InferContext& c, std::size_t i);
/// Checks inputs i and j share a dtype.
void expect_same_dtype(const InferContext& c, std::size_t i, std::size_t j);
/// Checks input i has `rank` dims.
void expect_rank(const InferContext& c, std::size_t i, std::size_t rank, const char* layout);
/// Maps an axis of a rank-`rank` input into [0, rank), with an error naming the op.
int axis_of(const InferContext& c, std::int64_t axis, std::size_t rank);
/// The reduced-axes mask of attribute "axes" (empty = all) for an input of rank `rank`.
std::vector<bool> reduced_axes(const InferContext& c, std::size_t rank);
/// Inference of backward ops taking (grad, x) or (grad, y) of one shape: the gradient's info.
std::vector<ValueInfo> infer_grad_pair(const InferContext& c);
/// The dtype a product (matmul, conv2d) is written in: its operands' (input 0), or the node's
/// "out_dtype" attribute where kernels::product_dtype allows it (f32 from bf16 or f16 operands).
DType product_dtype(const InferContext& c);
/// Single-output inference result.
inline std::vector<ValueInfo> one(DType d, SymShape s) { return {ValueInfo{d, std::move(s)}}; }
/// Boolean attribute stored as an integer.
inline bool get_flag(const Attrs& a, const char* name) { return a.has(name) && a.get_int(name) != 0; }

/// x [..., C] as rows [N, C], the layout of the kernels that take rows (cross-entropy).
inline Tensor rows_of(const Tensor& x) { return x.reshape({x.numel() / x.shape().back(), x.shape().back()}); }
/// x [...] as one row [N]: per-row values (targets) beside rows_of's rows.
inline Tensor flat(const Tensor& x) { return x.reshape({x.numel()}); }
/// The gradient of a broadcast input: g summed to the shape of `like` when they differ.
Var unbroadcast(const Var& g, const Var& like);

}  // namespace troupe::graph::detail
