// Op definitions of the elementwise family: binary ops with broadcasting, scalar forms, unary
// functions and their backward ops.
#include "op_helpers.hpp"
#include "troupe/kernels/elementwise.hpp"

namespace troupe::graph {
namespace {
using namespace detail;
using kernels::BinaryOp;
using kernels::UnaryOp;

std::vector<ValueInfo> infer_binary(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  return one(c.inputs[0].dtype, broadcast(c.inputs[0].shape, c.inputs[1].shape, c.op));
}

std::vector<ValueInfo> infer_same_as_first(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}


template <BinaryOp K>
std::vector<Tensor> compute_binary(const std::vector<Tensor>& in, const ComputeContext&) {
  return {kernels::binary(K, in[0], in[1])};
}

std::vector<Var> grad_add(const GradContext& c) {
  const Var dy = c.grad_output(0);
  return {c.needs_grad[0] ? unbroadcast(dy, c.inputs[0]) : Var(), c.needs_grad[1] ? unbroadcast(dy, c.inputs[1]) : Var()};
}
std::vector<Var> grad_sub(const GradContext& c) {
  const Var dy = c.grad_output(0);
  return {c.needs_grad[0] ? unbroadcast(dy, c.inputs[0]) : Var(), c.needs_grad[1] ? unbroadcast(-dy, c.inputs[1]) : Var()};
}
std::vector<Var> grad_mul(const GradContext& c) {
  const Var dy = c.grad_output(0);
  const Var &a = c.inputs[0], &b = c.inputs[1];
  return {c.needs_grad[0] ? unbroadcast(dy * b, a) : Var(), c.needs_grad[1] ? unbroadcast(dy * a, b) : Var()};
}
std::vector<Var> grad_div(const GradContext& c) {
  const Var dy = c.grad_output(0);
  const Var &a = c.inputs[0], &b = c.inputs[1];
  return {c.needs_grad[0] ? unbroadcast(dy / b, a) : Var(),
          c.needs_grad[1] ? unbroadcast(-(dy * c.outputs[0]) / b, b) : Var()};
}

OpDef binary_def(const char* name, std::vector<Tensor> (*compute)(const std::vector<Tensor>&, const ComputeContext&),
                 GradFn grad) {
  return OpDef{name, name, infer_binary, compute, std::move(grad), {}};
}
TROUPE_DEFINE_OP(binary_def("add", compute_binary<BinaryOp::add>, grad_add));
TROUPE_DEFINE_OP(binary_def("sub", compute_binary<BinaryOp::sub>, grad_sub));
TROUPE_DEFINE_OP(binary_def("mul", compute_binary<BinaryOp::mul>, grad_mul));
TROUPE_DEFINE_OP(binary_def("div", compute_binary<BinaryOp::div>, grad_div));

TROUPE_DEFINE_OP((OpDef{"add_scalar", "add_scalar", infer_same_as_first,
                        [](const std::vector<Tensor>& in, const ComputeContext& c) -> std::vector<Tensor> {
                          return {kernels::add(in[0], c.attrs.get_double("s"))};
                        },
                        [](const GradContext& c) -> std::vector<Var> { return {c.grad_output(0)}; },
                        {}}));
TROUPE_DEFINE_OP((OpDef{"mul_scalar", "mul_scalar", infer_same_as_first,
                        [](const std::vector<Tensor>& in, const ComputeContext& c) -> std::vector<Tensor> {
                          return {kernels::mul(in[0], c.attrs.get_double("s"))};
                        },
                        [](const GradContext& c) -> std::vector<Var> {
                          return {c.grad_output(0) * c.attrs.get_double("s")};
                        },
                        {}}));

template <UnaryOp K>
std::vector<Tensor> compute_unary(const std::vector<Tensor>& in, const ComputeContext&) {
  return {kernels::unary(K, in[0])};
}
template <UnaryOp K>
std::vector<Tensor> compute_unary_backward(const std::vector<Tensor>& in, const ComputeContext&) {
  return {kernels::unary_backward(K, in[0], in[1])};
}

// A unary op whose gradient is its "<name>_backward" op applied to (grad, x), and that backward op.
template <UnaryOp K>
struct UnaryDefs {
  UnaryDefs() {
    const std::string name = kernels::to_string(K), backward = name + "_backward";
    OpRegistry::instance().add(OpDef{name, name, infer_same_as_first, compute_unary<K>,
                                     [backward](const GradContext& c) -> std::vector<Var> {
                                       return {apply1(backward, {c.grad_output(0), c.inputs[0]})};
                                     },
                                     {}});
    OpRegistry::instance().add(OpDef{backward, backward, infer_grad_pair, compute_unary_backward<K>, {}, {}});
  }
};
const UnaryDefs<UnaryOp::neg> neg_defs;
const UnaryDefs<UnaryOp::exp> exp_defs;
const UnaryDefs<UnaryOp::log> log_defs;
const UnaryDefs<UnaryOp::tanh> tanh_defs;
const UnaryDefs<UnaryOp::sqrt> sqrt_defs;
const UnaryDefs<UnaryOp::rsqrt> rsqrt_defs;
const UnaryDefs<UnaryOp::gelu> gelu_defs;
const UnaryDefs<UnaryOp::silu> silu_defs;

// relu's backward is the leaky form with slope 0, so custom gradients can reuse it with a slope.
TROUPE_DEFINE_OP((OpDef{"relu", "relu", infer_same_as_first, compute_unary<UnaryOp::relu>,
                        [](const GradContext& c) -> std::vector<Var> {
                          return {relu_backward(c.grad_output(0), c.inputs[0], 0.0)};
                        },
                        {}}));
TROUPE_DEFINE_OP((OpDef{"relu_backward", "relu_backward", infer_grad_pair,
                        [](const std::vector<Tensor>& in, const ComputeContext& c) -> std::vector<Tensor> {
                          return {kernels::relu_backward(in[0], in[1], c.attrs.get_double("slope"))};
                        },
                        {},
                        {}}));

}  // namespace
}  // namespace troupe::graph
