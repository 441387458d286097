// The elementwise family: binary ops with broadcasting, their scalar forms and operators, and the
// unary functions with their backward ops. Each op: builder, definition, gradient rule.
#include "op_helpers.hpp"
#include "shard_rules.hpp"
#include "troupe/kernels/elementwise_chain.hpp"

namespace troupe::graph {
namespace {
using namespace detail;

std::vector<ValueInfo> infer_binary(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  return one(c.inputs[0].dtype, broadcast(c.inputs[0].shape, c.inputs[1].shape, c.op));
}

std::vector<ValueInfo> infer_same_as_input(const InferContext& c) {
  expect_arity(c, 1, 1);
  expect_floating(c, 0);
  return one(c.inputs[0].dtype, c.inputs[0].shape);
}

}  // namespace

Var add(const Var& a, const Var& b) { return apply1("add", {a, b}); }
TROUPE_DEFINE_OP({.name = "add", .infer = infer_binary, .sharding = shard_additive, .kernel = "add",
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    const Var dy = c.grad_output(0);
                    return {c.needs_grad[0] ? unbroadcast(dy, c.inputs[0]) : Var(),
                            c.needs_grad[1] ? unbroadcast(dy, c.inputs[1]) : Var()};
                  }, .in_place = true});

Var sub(const Var& a, const Var& b) { return apply1("sub", {a, b}); }
TROUPE_DEFINE_OP({.name = "sub", .infer = infer_binary, .sharding = shard_additive, .kernel = "sub",
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    const Var dy = c.grad_output(0);
                    return {c.needs_grad[0] ? unbroadcast(dy, c.inputs[0]) : Var(),
                            c.needs_grad[1] ? unbroadcast(-dy, c.inputs[1]) : Var()};
                  }, .in_place = true});

Var mul(const Var& a, const Var& b) { return apply1("mul", {a, b}); }
TROUPE_DEFINE_OP({.name = "mul", .infer = infer_binary, .sharding = shard_product, .kernel = "mul",
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    const Var dy = c.grad_output(0);
                    const Var &a = c.inputs[0], &b = c.inputs[1];
                    return {c.needs_grad[0] ? unbroadcast(dy * b, a) : Var(),
                            c.needs_grad[1] ? unbroadcast(dy * a, b) : Var()};
                  }, .in_place = true});

Var div(const Var& a, const Var& b) { return apply1("div", {a, b}); }
TROUPE_DEFINE_OP({.name = "div", .infer = infer_binary, .sharding = shard_linear_in_first, .kernel = "div",
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    const Var dy = c.grad_output(0);
                    const Var &a = c.inputs[0], &b = c.inputs[1];
                    return {c.needs_grad[0] ? unbroadcast(dy / b, a) : Var(),
                            c.needs_grad[1] ? unbroadcast(-(dy * c.outputs[0]) / b, b) : Var()};
                  }, .in_place = true});

Var operator+(const Var& a, const Var& b) { return add(a, b); }
Var operator-(const Var& a, const Var& b) { return sub(a, b); }
Var operator*(const Var& a, const Var& b) { return mul(a, b); }
Var operator/(const Var& a, const Var& b) { return div(a, b); }

// x + s and x * s with a scalar s (attribute "value").
Var operator+(const Var& a, double s) { return apply1("add_scalar", {a}, Attrs().set("value", s)); }
TROUPE_DEFINE_OP({.name = "add_scalar", .infer = infer_same_as_input, .sharding = shard_pointwise, .kernel = "add_scalar",
                  .grad = [](const GradContext& c) -> std::vector<Var> { return {c.grad_output(0)}; }, .in_place = true});
Var operator*(const Var& a, double s) { return apply1("mul_scalar", {a}, Attrs().set("value", s)); }
TROUPE_DEFINE_OP({.name = "mul_scalar", .infer = infer_same_as_input, .sharding = shard_linear_in_first, .kernel = "mul_scalar",
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {c.grad_output(0) * c.attrs.get_double("value")};
                  }, .in_place = true});
Var operator-(const Var& a, double s) { return a + (-s); }
Var operator/(const Var& a, double s) { return a * (1.0 / s); }
Var operator+(double s, const Var& a) { return a + s; }
Var operator-(double s, const Var& a) { return neg(a) + s; }
Var operator*(double s, const Var& a) { return a * s; }
Var operator-(const Var& a) { return neg(a); }

// Unary functions. Each gradient is the op's backward op applied to (dy, x), a kernel of its own
// ("<op>_backward") that computes dy * f'(x) in one pass.
namespace {
GradFn backward_of_input(const char* backward) {
  return [backward](const GradContext& c) -> std::vector<Var> {
    return {apply1(backward, {c.grad_output(0), c.inputs[0]})};
  };
}
}  // namespace

// A unary function from the kernels' list (kernels/elementwise.hpp) as a graph op: its builder,
// its definition, and its backward op dy * f'(x) ("<op>_backward"); one line per op below, with its
// sharding rule and what mixed precision does with it.
#define TROUPE_DEFINE_UNARY(op, sharding_rule, precision_rule)                                                 \
  Var op(const Var& x) { return apply1(#op, {x}); }                                                          \
  TROUPE_DEFINE_OP({.name = #op, .infer = infer_same_as_input, .sharding = sharding_rule, .kernel = #op,      \
                    .grad = backward_of_input(#op "_backward"), .in_place = true, .precision = precision_rule}); \
  TROUPE_DEFINE_OP({.name = #op "_backward", .infer = infer_grad_pair, .sharding = shard_linear_in_first,    \
                    .kernel = #op "_backward", .in_place = true})
TROUPE_DEFINE_UNARY(neg, shard_linear_in_first, Precision::follows);
TROUPE_DEFINE_UNARY(exp, shard_pointwise, Precision::keeps_f32);
TROUPE_DEFINE_UNARY(log, shard_pointwise, Precision::keeps_f32);
TROUPE_DEFINE_UNARY(tanh, shard_pointwise, Precision::follows);
TROUPE_DEFINE_UNARY(sqrt, shard_pointwise, Precision::follows);
TROUPE_DEFINE_UNARY(rsqrt, shard_pointwise, Precision::follows);
TROUPE_DEFINE_UNARY(gelu, shard_pointwise, Precision::follows);  // the tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
TROUPE_DEFINE_UNARY(silu, shard_pointwise, Precision::follows);
#undef TROUPE_DEFINE_UNARY

// gelu(h + b) for a bias b over h's last dim, in one pass that never stores the sum (level 3 fuses
// a Linear layer's bias with its gelu into it); equal to add-then-gelu bit for bit, gradients too.
namespace {
std::vector<ValueInfo> infer_bias_gelu(const InferContext& c) {
  expect_arity(c, 2, 2);
  expect_floating(c, 0);
  expect_same_dtype(c, 0, 1);
  const SymShape& h = c.inputs[0].shape;
  if (h.empty() || c.inputs[1].shape != SymShape{h.back()})
    shape_error(c, "the bias must have shape [" + (h.empty() ? std::string("?") : h.back().str()) + "], h's last dim");
  return one(c.inputs[0].dtype, h);
}
// (dy, h, b) -> dh.
std::vector<ValueInfo> infer_bias_gelu_backward(const InferContext& c) {
  expect_arity(c, 3, 3);
  if (c.inputs[0].shape != c.inputs[1].shape) shape_error(c, "the gradient must have the shape of h");
  return one(c.inputs[1].dtype, c.inputs[1].shape);
}
std::vector<Var> grad_bias_gelu(const GradContext& c) {
  const Var dh = apply1("bias_gelu_backward", {c.grad_output(0), c.inputs[0], c.inputs[1]});
  return {c.needs_grad[0] ? dh : Var(), c.needs_grad[1] ? sum_to(dh, c.inputs[1]) : Var()};
}
}  // namespace
Var bias_gelu(const Var& h, const Var& b) { return apply1("bias_gelu", {h, b}); }
TROUPE_DEFINE_OP({.name = "bias_gelu", .infer = infer_bias_gelu, .sharding = shard_pointwise, .kernel = "bias_gelu", .grad = grad_bias_gelu, .in_place = true});
TROUPE_DEFINE_OP({.name = "bias_gelu_backward", .infer = infer_bias_gelu_backward, .sharding = shard_linear_in_first, .kernel = "bias_gelu_backward", .in_place = true});

// elementwise_chain(inputs...) {ops, args, value<j>}: steps of the ops above in one pass (level 3
// fuses chains of elementwise nodes into it). Its gradient recomputes the chain's intermediate
// values from its inputs with the steps' own ops and runs each step's own gradient rule backwards,
// so the forward pass stores nothing for it and the gradients are those of the unfused ops.
namespace {
// A step's op as a graph node sees it: its name and attributes.
Attrs step_attrs(const kernels::ChainStep& s) {
  if (s.op == kernels::ChainOp::relu_backward) return Attrs().set("negative_slope", s.value);
  return kernels::chain_op_has_value(s.op) ? Attrs().set("value", s.value) : Attrs();
}
std::vector<ValueInfo> infer_elementwise_chain(const InferContext& c) {
  expect_arity(c, 1, kernels::kMaxChainInputs);
  for (std::size_t k = 0; k < c.inputs.size(); ++k) {
    expect_floating(c, k);
    expect_same_dtype(c, 0, k);
  }
  std::vector<SymShape> shapes;
  for (const ValueInfo& in : c.inputs) shapes.push_back(in.shape);
  for (const kernels::ChainStep& s : kernels::chain_steps(c.attrs, c.inputs.size())) {
    const SymShape& a = shapes[static_cast<std::size_t>(s.a)];
    shapes.push_back(s.b < 0 ? a : broadcast(a, shapes[static_cast<std::size_t>(s.b)], c.op));
  }
  return one(c.inputs[0].dtype, shapes.back());
}
std::vector<Var> grad_elementwise_chain(const GradContext& c) {
  const std::vector<kernels::ChainStep> steps = kernels::chain_steps(c.attrs, c.inputs.size());
  const std::size_t n = c.inputs.size(), last = steps.size() - 1;
  std::vector<Var> values = c.inputs;
  for (std::size_t j = 0; j < last; ++j) {
    const kernels::ChainStep& s = steps[j];
    std::vector<Var> operands{values[static_cast<std::size_t>(s.a)]};
    if (s.b >= 0) operands.push_back(values[static_cast<std::size_t>(s.b)]);
    values.push_back(apply1(kernels::to_string(s.op), operands, step_attrs(s)));
  }
  values.push_back(c.outputs[0]);
  std::vector<Var> grads(values.size());
  grads.back() = c.grad_output(0);
  const SymShape no_target;
  for (std::size_t j = steps.size(); j-- > 0;) {
    const Var gj = grads[n + j];
    if (!gj.defined()) continue;
    const kernels::ChainStep& s = steps[j];
    std::vector<ValueId> reads{s.a};
    if (s.b >= 0) reads.push_back(s.b);
    std::vector<Var> operands;
    std::vector<bool> needs;
    for (ValueId r : reads) {
      operands.push_back(values[static_cast<std::size_t>(r)]);
      needs.push_back(static_cast<std::size_t>(r) >= n || c.needs_grad[static_cast<std::size_t>(r)]);
    }
    const char* op = kernels::to_string(s.op);
    const Attrs attrs = step_attrs(s);
    const GradFn& rule = OpRegistry::instance().get(op).grad;
    const std::vector<Var> in_grads =
        (rule ? rule : missing_gradient(op))(GradContext{operands, {values[n + j]}, {gj}, attrs, no_target, needs});
    for (std::size_t i = 0; i < reads.size(); ++i) {
      if (!needs[i] || !in_grads[i].defined()) continue;
      Var& slot = grads[static_cast<std::size_t>(reads[i])];
      slot = slot.defined() ? slot + in_grads[i] : in_grads[i];
    }
  }
  grads.resize(n);
  return grads;
}
}  // namespace
TROUPE_DEFINE_OP({.name = "elementwise_chain", .infer = infer_elementwise_chain, .sharding = shard_pointwise, .kernel = "elementwise_chain",
                  .grad = grad_elementwise_chain, .in_place = true, .precision = Precision::f32});

// relu's backward is the leaky form, so custom gradients can reuse it with a slope.
Var relu(const Var& x) { return apply1("relu", {x}); }
TROUPE_DEFINE_OP({.name = "relu", .infer = infer_same_as_input, .sharding = shard_pointwise, .kernel = "relu",
                  .grad = [](const GradContext& c) -> std::vector<Var> {
                    return {relu_backward(c.grad_output(0), c.inputs[0], 0.0)};
                  }, .in_place = true});
Var relu_backward(const Var& grad, const Var& x, double negative_slope) {
  return apply1("relu_backward", {grad, x}, Attrs().set("negative_slope", negative_slope));
}
TROUPE_DEFINE_OP({.name = "relu_backward", .infer = infer_grad_pair, .sharding = shard_linear_in_first, .kernel = "relu_backward", .in_place = true});

}  // namespace troupe::graph
