#include "op_helpers.hpp"

#include <optional>
#include <sstream>

#include "troupe/kernels/matmul.hpp"

namespace troupe::graph::detail {

DType product_dtype(const InferContext& c) {
  const std::optional<DType> out =
      c.attrs.has("out_dtype") ? std::optional<DType>(static_cast<DType>(c.attrs.get_int("out_dtype"))) : std::nullopt;
  return kernels::product_dtype(c.op.c_str(), c.inputs[0].dtype, out);
}

std::string inputs_str(const InferContext& c) {
  std::ostringstream os;
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    os << (i ? ", " : "") << dtype_name(c.inputs[i].dtype) << sym_shape_str(c.inputs[i].shape);
  return os.str();
}

void shape_error(const InferContext& c, const std::string& why) {
  fail(ErrorKind::shape_mismatch, c.op, ": inputs ", inputs_str(c), ": ", why);
}

void expect_arity(const InferContext& c, std::size_t lo, std::size_t hi) {
  TROUPE_CHECK(c.inputs.size() >= lo && c.inputs.size() <= hi, invalid_argument, c.op, ": takes ", lo,
               lo == hi ? "" : " to " + std::to_string(hi), " inputs, got ", c.inputs.size());
}

void expect_floating(const InferContext& c, std::size_t i) {
  TROUPE_CHECK(is_floating(c.inputs[i].dtype), dtype_mismatch, c.op, ": input ", i, " must be floating point, got ",
               inputs_str(c));
}

void expect_integer(const InferContext& c, std::size_t i) {
  const DType d = c.inputs[i].dtype;
  TROUPE_CHECK(d == DType::i32 || d == DType::i64, dtype_mismatch, c.op, ": input ", i,
               " must be integer (i32 or i64), got ", inputs_str(c));
}

void expect_same_dtype(const InferContext& c, std::size_t i, std::size_t j) {
  TROUPE_CHECK(c.inputs[i].dtype == c.inputs[j].dtype, dtype_mismatch, c.op, ": inputs ", i, " and ", j,
               " must share a dtype, got ", inputs_str(c), "; insert cast()");
}

void expect_rank(const InferContext& c, std::size_t i, std::size_t rank, const char* layout) {
  if (c.inputs[i].shape.size() != rank)
    shape_error(c, "input " + std::to_string(i) + " must have rank " + std::to_string(rank) + " (" + layout + ")");
}

int axis_of(const InferContext& c, std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) shape_error(c, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

std::vector<bool> reduced_axes(const InferContext& c, std::size_t rank) {
  const auto& axes = c.attrs.get_ints("axes");
  std::vector<bool> mask(rank, axes.empty());
  for (auto a : axes) {
    const int n = axis_of(c, a, rank);
    if (mask[static_cast<std::size_t>(n)] && !axes.empty()) shape_error(c, "axis " + std::to_string(a) + " appears twice");
    mask[static_cast<std::size_t>(n)] = true;
  }
  return mask;
}

std::vector<ValueInfo> infer_grad_pair(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  if (c.inputs[0].shape != c.inputs[1].shape) shape_error(c, "the gradient must have the shape of the value it belongs to");
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}

Var unbroadcast(const Var& g, const Var& like) { return g.shape() == like.shape() ? g : sum_to(g, like); }

}  // namespace troupe::graph::detail
