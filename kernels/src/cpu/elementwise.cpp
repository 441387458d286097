#include "troupe/kernels/elementwise.hpp"

#include <cmath>

#include "cpu/strided_loop.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::ops {

const char* to_string(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
  }
  return "?";
}

const char* to_string(UnaryOp op) {
  switch (op) {
    case UnaryOp::relu: return "relu";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::silu: return "silu";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::rsqrt: return "rsqrt";
    case UnaryOp::neg: return "neg";
  }
  return "?";
}

namespace {

void check_floating(const Tensor& t, const char* op, const char* role) {
  TROUPE_CHECK(t.defined(), invalid_argument, op, ": ", role, " is undefined");
  TROUPE_CHECK(t.dtype() == DType::f32, dtype_mismatch, op, ": ", role, " ", t.str(), " must be f32");
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = to_string(op);
  check_floating(a, name, "input a");
  check_floating(b, name, "input b");
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  std::vector<Tensor> out{Tensor::empty(out_shape, DType::f32, a.device())};
  dispatch(name, {a, b}, out);
  return out[0];
}

Tensor binary(BinaryOp op, const Tensor& a, double s) {
  const std::string name = std::string(to_string(op)) + "_scalar";
  check_floating(a, name.c_str(), "input");
  std::vector<Tensor> out{Tensor::empty(a.shape(), DType::f32, a.device())};
  dispatch(name, {a}, out, Attrs().set("value", s));
  return out[0];
}

Tensor unary(UnaryOp op, const Tensor& x) {
  const char* name = to_string(op);
  check_floating(x, name, "input");
  std::vector<Tensor> out{Tensor::empty(x.shape(), DType::f32, x.device())};
  dispatch(name, {x}, out);
  return out[0];
}

namespace {

Tensor grad_like(const char* op, const Tensor& grad, const Tensor& x) {
  check_floating(grad, op, "grad");
  check_floating(x, op, "x");
  TROUPE_CHECK(grad.shape() == x.shape(), shape_mismatch, op, ": grad ", shape_str(grad.shape()),
               " and x ", shape_str(x.shape()), " must have the same shape");
  return Tensor::empty(x.shape(), DType::f32, x.device());
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

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// Math of each op in float. Forward f(x) and derivative f'(x).
template <UnaryOp Op>
inline float forward(float x) {
  if constexpr (Op == UnaryOp::relu) return x > 0.f ? x : 0.f;
  if constexpr (Op == UnaryOp::gelu) return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
  if constexpr (Op == UnaryOp::silu) return x / (1.f + std::exp(-x));
  if constexpr (Op == UnaryOp::exp) return std::exp(x);
  if constexpr (Op == UnaryOp::log) return std::log(x);
  if constexpr (Op == UnaryOp::tanh) return std::tanh(x);
  if constexpr (Op == UnaryOp::sqrt) return std::sqrt(x);
  if constexpr (Op == UnaryOp::rsqrt) return 1.f / std::sqrt(x);
  if constexpr (Op == UnaryOp::neg) return -x;
}

template <UnaryOp Op>
inline float derivative(float x) {
  if constexpr (Op == UnaryOp::gelu) {
    const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
    const float t = std::tanh(u);
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCoeff * x * x);
  }
  if constexpr (Op == UnaryOp::silu) {
    const float s = 1.f / (1.f + std::exp(-x));
    return s * (1.f + x * (1.f - s));
  }
  if constexpr (Op == UnaryOp::exp) return std::exp(x);
  if constexpr (Op == UnaryOp::log) return 1.f / x;
  if constexpr (Op == UnaryOp::tanh) {
    const float t = std::tanh(x);
    return 1.f - t * t;
  }
  if constexpr (Op == UnaryOp::sqrt) return 0.5f / std::sqrt(x);
  if constexpr (Op == UnaryOp::rsqrt) return -0.5f / (x * std::sqrt(x));
  if constexpr (Op == UnaryOp::neg) return -1.f;
  return 0.f;
}

template <BinaryOp Op>
inline float apply(float a, float b) {
  if constexpr (Op == BinaryOp::add) return a + b;
  if constexpr (Op == BinaryOp::sub) return a - b;
  if constexpr (Op == BinaryOp::mul) return a * b;
  if constexpr (Op == BinaryOp::div) return a / b;
}

// Walks out[i] = f(in0[i], in1[i], ...) over broadcast/strided operands.
template <std::size_t N, class F>
void map_kernel(const std::vector<Tensor>& in, Tensor& out, F f) {
  std::array<Strides, N> st;
  std::array<const Strides*, N + 1> ptrs;
  std::array<const float*, N> src;
  ptrs[0] = &out.strides();
  for (std::size_t k = 0; k < N; ++k) {
    st[k] = cpu::broadcast_strides(in[k].shape(), in[k].strides(), out.shape());
    ptrs[k + 1] = &st[k];
    src[k] = in[k].data<float>();
  }
  float* dst = out.data<float>();
  cpu::for_each_run<N + 1>(out.shape(), ptrs, [&](auto off, auto step, std::int64_t n) {
    float* d = dst + off[0];
    if constexpr (N == 1) {
      const float* a = src[0] + off[1];
      if (step[0] == 1 && step[1] == 1)
        for (std::int64_t i = 0; i < n; ++i) d[i] = f(a[i]);
      else
        for (std::int64_t i = 0; i < n; ++i) d[i * step[0]] = f(a[i * step[1]]);
    } else {
      const float* a = src[0] + off[1];
      const float* b = src[1] + off[2];
      if (step[0] == 1 && step[1] == 1 && step[2] == 1)
        for (std::int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
      else
        for (std::int64_t i = 0; i < n; ++i) d[i * step[0]] = f(a[i * step[1]], b[i * step[2]]);
    }
  });
}

template <BinaryOp Op>
void binary_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  map_kernel<2>(in, out[0], [](float a, float b) { return apply<Op>(a, b); });
}

template <BinaryOp Op>
void binary_scalar_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const float s = static_cast<float>(attrs.get_double("value"));
  map_kernel<1>(in, out[0], [s](float a) { return apply<Op>(a, s); });
}

template <UnaryOp Op>
void unary_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  map_kernel<1>(in, out[0], [](float x) { return forward<Op>(x); });
}

template <UnaryOp Op>
void unary_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  map_kernel<2>(in, out[0], [](float g, float x) { return g * derivative<Op>(x); });
}

void relu_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const float slope = static_cast<float>(attrs.get_double("negative_slope"));
  map_kernel<2>(in, out[0], [slope](float g, float x) { return x > 0.f ? g : slope * g; });
}

}  // namespace

#define TROUPE_BINARY(op)                                                                 \
  TROUPE_REGISTER_KERNEL(#op, cpu, f32, binary_kernel<BinaryOp::op>);                    \
  TROUPE_REGISTER_KERNEL(#op "_scalar", cpu, f32, binary_scalar_kernel<BinaryOp::op>)
TROUPE_BINARY(add);
TROUPE_BINARY(sub);
TROUPE_BINARY(mul);
TROUPE_BINARY(div);
#undef TROUPE_BINARY

#define TROUPE_UNARY(op)                                                                  \
  TROUPE_REGISTER_KERNEL(#op, cpu, f32, unary_kernel<UnaryOp::op>);                      \
  TROUPE_REGISTER_KERNEL(#op "_backward", cpu, f32, unary_backward_kernel<UnaryOp::op>)
TROUPE_REGISTER_KERNEL("relu", cpu, f32, unary_kernel<UnaryOp::relu>);
TROUPE_REGISTER_KERNEL("relu_backward", cpu, f32, relu_backward_kernel);
TROUPE_UNARY(gelu);
TROUPE_UNARY(silu);
TROUPE_UNARY(exp);
TROUPE_UNARY(log);
TROUPE_UNARY(tanh);
TROUPE_UNARY(sqrt);
TROUPE_UNARY(rsqrt);
TROUPE_UNARY(neg);
#undef TROUPE_UNARY

}  // namespace troupe::ops
