// The matmul front end: dtype and shape checks, the broadcast batch of the output, dispatch.
#include "troupe/kernels/matmul.hpp"

#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {

namespace {

// The checked output shape of op(a) @ op(b).
Shape product_shape(const char* op, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  TROUPE_CHECK(a.defined() && b.defined(), invalid_argument, op, ": undefined input");
  TROUPE_CHECK(a.dim() >= 2 && b.dim() >= 2, shape_mismatch, op, ": inputs need rank >= 2, got ", shape_str(a.shape()),
               " and ", shape_str(b.shape()));
  TROUPE_CHECK(a.dtype() == b.dtype(), dtype_mismatch, op, ": dtypes differ: ", a.str(), " and ", b.str());
  TROUPE_CHECK(is_floating(a.dtype()), dtype_mismatch, op, ": ", a.str(), " has dtype ", dtype_name(a.dtype()), "; ",
               op, " takes f32, f64, bf16 or f16");
  const std::int64_t m = a.size(trans_a ? -1 : -2), ka = a.size(trans_a ? -2 : -1);
  const std::int64_t kb = b.size(trans_b ? -1 : -2), n = b.size(trans_b ? -2 : -1);
  TROUPE_CHECK(ka == kb, shape_mismatch, op, ": inner dimensions differ: a ", shape_str(a.shape()),
               trans_a ? " (transposed)" : "", " gives K=", ka, ", b ", shape_str(b.shape()),
               trans_b ? " (transposed)" : "", " gives K=", kb);
  const Shape &as = a.shape(), &bs = b.shape();
  Shape out_shape = broadcast_shapes(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2),
                                     "matmul (batch dims)");
  out_shape.push_back(m);
  out_shape.push_back(n);
  return out_shape;
}

Attrs transposes(bool trans_a, bool trans_b) {
  return Attrs().set("trans_a", std::int64_t{trans_a}).set("trans_b", std::int64_t{trans_b});
}

}  // namespace

DType product_dtype(const char* op, DType operands, std::optional<DType> out) {
  if (!out || *out == operands) return operands;
  TROUPE_CHECK(is_low_precision(operands) && *out == DType::f32, dtype_mismatch, op,
               ": a product of ", dtype_name(operands), " operands cannot be written as ", dtype_name(*out),
               "; only bf16 and f16 products may be written as f32 (they accumulate in f32)");
  return *out;
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, std::optional<DType> out_dtype) {
  const Shape shape = product_shape("matmul", a, b, trans_a, trans_b);
  std::vector<Tensor> out{Tensor::empty(shape, product_dtype("matmul", a.dtype(), out_dtype), a.device())};
  dispatch("matmul", {a, b}, out, transposes(trans_a, trans_b));
  return out[0];
}

Tensor matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a, bool trans_b,
                   std::optional<DType> out_dtype) {
  const Shape shape = product_shape("matmul_bias", a, b, trans_a, trans_b);
  const DType dtype = product_dtype("matmul_bias", a.dtype(), out_dtype);
  TROUPE_CHECK(bias.defined() && bias.shape() == Shape{shape.back()}, shape_mismatch, "matmul_bias: the bias ",
               bias.defined() ? bias.str() : std::string("(undefined)"), " must have shape [", shape.back(),
               "], the product's last dim");
  TROUPE_CHECK(bias.dtype() == dtype, dtype_mismatch, "matmul_bias: the bias ", bias.str(),
               " must have the result's dtype, ", dtype_name(dtype));
  std::vector<Tensor> out{Tensor::empty(shape, dtype, a.device())};
  dispatch("matmul_bias", {a, b, bias}, out, transposes(trans_a, trans_b));
  return out[0];
}

}  // namespace troupe::kernels
