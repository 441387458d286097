#pragma once
// The math of every elementwise op, written once for the CPU and the CUDA kernels: the forward f(x)
// and derivative f'(x) of each unary op, the binary ops, and the function objects the kernels map
// (shared by an op's own kernel and the CPU's fused chain), in a compute type T (float or double)
// with the math functions of the device's policy M: M::exp, M::gelu_exp (gelu's, which the CPU
// vectorises), M::log, M::tanh, M::sqrt.

#include "troupe/kernels/elementwise.hpp"

#ifdef __CUDACC__
#define TROUPE_HOST_DEVICE __host__ __device__
#else
#define TROUPE_HOST_DEVICE
#endif

namespace troupe::kernels::math {

inline constexpr double kSqrt2OverPi = 0.7978845608028654;
inline constexpr double kGeluCoeff = 0.044715;

// gelu uses 0.5 (1 + tanh(u)) = sigmoid(2u), so it needs one exp and no tanh.
template <UnaryOp Op, class M, class T>
TROUPE_HOST_DEVICE inline T forward(T x) {
  if constexpr (Op == UnaryOp::relu) return x < T(0) ? T(0) : x;  // NaN passes through, as in IEEE max
  if constexpr (Op == UnaryOp::gelu) {
    const T c = static_cast<T>(kSqrt2OverPi), k = static_cast<T>(kGeluCoeff);
    return x / (T(1) + M::gelu_exp(T(-2) * c * (x + k * x * x * x)));
  }
  if constexpr (Op == UnaryOp::silu) return x / (T(1) + M::exp(-x));
  if constexpr (Op == UnaryOp::exp) return M::exp(x);
  if constexpr (Op == UnaryOp::log) return M::log(x);
  if constexpr (Op == UnaryOp::tanh) return M::tanh(x);
  if constexpr (Op == UnaryOp::sqrt) return M::sqrt(x);
  if constexpr (Op == UnaryOp::rsqrt) return T(1) / M::sqrt(x);
  if constexpr (Op == UnaryOp::neg) return -x;
}

template <UnaryOp Op, class M, class T>
TROUPE_HOST_DEVICE inline T derivative(T x) {
  if constexpr (Op == UnaryOp::gelu) {
    // With s = sigmoid(2u): d/dx = s + 2 x s (1 - s) u'(x), since 1 - tanh(u)^2 = 4 s (1 - s).
    const T c = static_cast<T>(kSqrt2OverPi), k = static_cast<T>(kGeluCoeff);
    const T s = T(1) / (T(1) + M::gelu_exp(T(-2) * c * (x + k * x * x * x)));
    return s + T(2) * x * s * (T(1) - s) * c * (T(1) + T(3) * k * x * x);
  }
  if constexpr (Op == UnaryOp::silu) {
    const T s = T(1) / (T(1) + M::exp(-x));
    return s * (T(1) + x * (T(1) - s));
  }
  if constexpr (Op == UnaryOp::exp) return M::exp(x);
  if constexpr (Op == UnaryOp::log) return T(1) / x;
  if constexpr (Op == UnaryOp::tanh) {
    const T t = M::tanh(x);
    return T(1) - t * t;
  }
  if constexpr (Op == UnaryOp::sqrt) return T(0.5) / M::sqrt(x);
  if constexpr (Op == UnaryOp::rsqrt) return T(-0.5) / (x * M::sqrt(x));
  if constexpr (Op == UnaryOp::neg) return T(-1);
  return T(0);
}

template <BinaryOp Op, class T>
TROUPE_HOST_DEVICE inline T apply(T a, T b) {
  if constexpr (Op == BinaryOp::add) return a + b;
  if constexpr (Op == BinaryOp::sub) return a - b;
  if constexpr (Op == BinaryOp::mul) return a * b;
  if constexpr (Op == BinaryOp::div) return a / b;
}

/// a op b.
template <BinaryOp Op, class T>
struct BinaryFn {
  TROUPE_HOST_DEVICE T operator()(T a, T b) const { return apply<Op>(a, b); }
};
/// a op s, for a scalar s.
template <BinaryOp Op, class T>
struct ScalarFn {
  T s;
  TROUPE_HOST_DEVICE T operator()(T a) const { return apply<Op>(a, s); }
};
/// f(x).
template <UnaryOp Op, class M, class T>
struct ForwardFn {
  TROUPE_HOST_DEVICE T operator()(T x) const { return forward<Op, M>(x); }
};
/// g f'(x).
template <UnaryOp Op, class M, class T>
struct BackwardFn {
  TROUPE_HOST_DEVICE T operator()(T g, T x) const { return g * derivative<Op, M>(x); }
};
/// relu's (or leaky relu's) gradient: g where x > 0, else slope g.
template <class T>
struct ReluBackwardFn {
  T slope;
  TROUPE_HOST_DEVICE T operator()(T g, T x) const { return x > T(0) ? g : slope * g; }
};
/// gelu(h + b), with the sum formed in T exactly as the add kernel forms it.
template <class M, class T>
struct BiasGeluFn {
  TROUPE_HOST_DEVICE T operator()(T h, T b) const { return forward<UnaryOp::gelu, M>(static_cast<T>(h + b)); }
};
/// g gelu'(h + b).
template <class M, class T>
struct BiasGeluBackwardFn {
  TROUPE_HOST_DEVICE T operator()(T g, T h, T b) const { return g * derivative<UnaryOp::gelu, M>(static_cast<T>(h + b)); }
};

}  // namespace troupe::kernels::math
