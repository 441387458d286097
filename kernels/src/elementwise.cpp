// The elementwise front ends: dtype and shape checks, the broadcast output, dispatch by op name.
#include "troupe/kernels/elementwise.hpp"

#include <string>

#include "float_checks.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {

#define TROUPE_NAME_CASE(Enum, op) \
  case Enum::op: return #op;
const char* to_string(BinaryOp op) {
#define TROUPE_BINARY_CASE(op) TROUPE_NAME_CASE(BinaryOp, op)
  switch (op) { TROUPE_BINARY_OPS(TROUPE_BINARY_CASE) }
#undef TROUPE_BINARY_CASE
  return "?";
}

const char* to_string(UnaryOp op) {
#define TROUPE_UNARY_CASE(op) TROUPE_NAME_CASE(UnaryOp, op)
  switch (op) { TROUPE_UNARY_OPS(TROUPE_UNARY_CASE) }
#undef TROUPE_UNARY_CASE
  return "?";
}
#undef TROUPE_NAME_CASE

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = to_string(op);
  check_float(name, "input a", a, true);
  check_float_like(name, "input b", b, "input a", a, true);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  std::vector<Tensor> out{Tensor::empty(out_shape, a.dtype(), a.device())};
  dispatch(name, {a, b}, out);
  return out[0];
}

void binary_into(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = to_string(op);
  check_float(name, "input a", a, true);
  check_float_like(name, "input b", b, "input a", a, true);
  check_float_like(name, "output", out, "input a", a, true);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  TROUPE_CHECK(out.shape() == out_shape, shape_mismatch, name, ": output ", out.str(), " must have the broadcast shape ",
               shape_str(out_shape));
  std::vector<Tensor> outs{out};
  dispatch(name, {a, b}, outs);
}

Tensor binary(BinaryOp op, const Tensor& a, double s) {
  const std::string name = std::string(to_string(op)) + "_scalar";
  check_float(name.c_str(), "input", a, true);
  std::vector<Tensor> out{Tensor::empty(a.shape(), a.dtype(), a.device())};
  dispatch(name, {a}, out, Attrs().set("value", s));
  return out[0];
}

Tensor unary(UnaryOp op, const Tensor& x) {
  const char* name = to_string(op);
  check_float(name, "input", x, true);
  std::vector<Tensor> out{Tensor::empty(x.shape(), x.dtype(), x.device())};
  dispatch(name, {x}, out);
  return out[0];
}

namespace {

// The output of a backward op, after checking grad against x.
Tensor grad_like(const char* op, const Tensor& grad, const Tensor& x) {
  check_float(op, "x", x, true);
  check_float_like(op, "grad", grad, "x", x, true);
  TROUPE_CHECK(grad.shape() == x.shape(), shape_mismatch, op, ": grad ", shape_str(grad.shape()),
               " and x ", shape_str(x.shape()), " must have the same shape");
  return Tensor::empty(x.shape(), x.dtype(), x.device());
}

}  // namespace

Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x) {
  if (op == UnaryOp::relu) return relu_backward(grad, x, 0.0);
  const std::string name = std::string(to_string(op)) + "_backward";
  std::vector<Tensor> out{grad_like(name.c_str(), grad, x)};
  dispatch(name, {grad, x}, out);
  return out[0];
}

Tensor relu_backward(const Tensor& grad, const Tensor& x, double negative_slope) {
  std::vector<Tensor> out{grad_like("relu_backward", grad, x)};
  dispatch("relu_backward", {grad, x}, out, Attrs().set("negative_slope", negative_slope));
  return out[0];
}

}  // namespace troupe::kernels
