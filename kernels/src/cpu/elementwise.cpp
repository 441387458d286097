// CPU elementwise kernels: the math of every unary and binary op (elementwise_math.hpp, shared with
// the CUDA kernels) in the element type, run by one strided loop over broadcast operands, and the
// fused chain of them, run tile by tile.
#include "troupe/kernels/elementwise.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "cpu/convert.hpp"
#include "cpu/fast_math.hpp"
#include "cpu/float_kernels.hpp"
#include "cpu/low_rows.hpp"
#include "cpu/strided_loop.hpp"
#include "elementwise_math.hpp"
#include "troupe/kernels/elementwise_chain.hpp"

namespace troupe::kernels {

namespace {

using cpu::ComputeType;

// The CPU's math functions for the shared elementwise math (elementwise_math.hpp): gelu's exp is
// the vectorising one for float; the rest are libm's.
struct CpuMath {
  template <class T>
  static T exp(T x) { return std::exp(x); }
  template <class T>
  static T gelu_exp(T x) {
    if constexpr (std::is_same_v<T, float>) return cpu::fast_exp(x);
    else return std::exp(x);
  }
  template <class T>
  static T log(T x) { return std::log(x); }
  template <class T>
  static T tanh(T x) { return std::tanh(x); }
  template <class T>
  static T sqrt(T x) { return std::sqrt(x); }
};

using math::BinaryFn;
using math::ReluBackwardFn;
using math::ScalarFn;
template <UnaryOp Op, class T>
using ForwardFn = math::ForwardFn<Op, CpuMath, T>;
template <UnaryOp Op, class T>
using BackwardFn = math::BackwardFn<Op, CpuMath, T>;
template <class T>
using BiasGeluFn = math::BiasGeluFn<CpuMath, T>;
template <class T>
using BiasGeluBackwardFn = math::BiasGeluBackwardFn<CpuMath, T>;

// The dense inner loops of map_kernel, where nearly all elementwise time goes.
template <class T, class F>
TROUPE_VECTOR_CLONES void map_dense(T* d, const T* a, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = f(a[i]);
}
template <class T, class F>
TROUPE_VECTOR_CLONES void map_dense(T* d, const T* a, const T* b, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}
template <class T, class F>
TROUPE_VECTOR_CLONES void map_dense(T* d, const T* a, const T* b, const T* c, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i], c[i]);
}

// Calls run(dst, src, offsets, steps, n) for each innermost run of the output (cut into tiles run
// by the idle cores too, each element costing about `element_work` nanoseconds), with the N
// inputs of element type T broadcast to it: offsets and steps are in elements, the output's first.
template <class T, std::size_t N, class Run>
void walk_runs(const std::vector<Tensor>& in, Tensor& out, double element_work, Run&& run) {
  std::array<Strides, N> st;
  std::array<const Strides*, N + 1> ptrs;
  std::array<const T*, N> src;
  ptrs[0] = &out.strides();
  for (std::size_t k = 0; k < N; ++k) {
    st[k] = cpu::broadcast_strides(in[k].shape(), in[k].strides(), out.shape());
    ptrs[k + 1] = &st[k];
    src[k] = in[k].data<T>();
  }
  T* dst = out.data<T>();
  cpu::parallel_for_each_run<N + 1>(out.shape(), ptrs, element_work,
                                    [&](auto off, auto step, std::int64_t n) { run(dst, src, off, step, n); });
}

// Walks out[i] = f(in0[i], in1[i], ...) over broadcast/strided operands of element type T.
template <class T, std::size_t N, class F>
void map_kernel(const std::vector<Tensor>& in, Tensor& out, F f) {
  walk_runs<T, N>(in, out, 1.0, [&](T* dst, const std::array<const T*, N>& src, auto off, auto step, std::int64_t n) {
    T* d = dst + off[0];
    if constexpr (N == 1) {
      const T* a = src[0] + off[1];
      if (step[0] == 1 && step[1] == 1)
        map_dense(d, a, n, f);
      else
        for (std::int64_t i = 0; i < n; ++i) d[i * step[0]] = f(a[i * step[1]]);
    } else if constexpr (N == 2) {
      const T* a = src[0] + off[1];
      const T* b = src[1] + off[2];
      if (step[0] == 1 && step[1] == 1 && step[2] == 1)
        map_dense(d, a, b, n, f);
      else
        for (std::int64_t i = 0; i < n; ++i) d[i * step[0]] = f(a[i * step[1]], b[i * step[2]]);
    } else {
      const T* a = src[0] + off[1];
      const T* b = src[1] + off[2];
      const T* c = src[2] + off[3];
      if (step[0] == 1 && step[1] == 1 && step[2] == 1 && step[3] == 1)
        map_dense(d, a, b, c, n, f);
      else
        for (std::int64_t i = 0; i < n; ++i) d[i * step[0]] = f(a[i * step[1]], b[i * step[2]], c[i * step[3]]);
    }
  });
}

// out[i] = f(in0[i], ...) for bf16 or f16 tensors: each run widened to f32 a tile at a time,
// computed by the f32 kernel's loop (so each element is the f32 kernel's result on the widened
// inputs) and rounded once (to nearest even) on the way out.
template <class Low, std::size_t N, class F>
void map_low_kernel(const std::vector<Tensor>& in, Tensor& out, F f) {
  constexpr std::int64_t kTile = 256;
  walk_runs<Low, N>(in, out, 1.5, [&](Low* dst, const std::array<const Low*, N>& src, auto off, auto step, std::int64_t n) {
    alignas(64) float wide[N + 1][kTile];
    for (std::int64_t c = 0; c < n; c += kTile) {
      const std::int64_t m = std::min(kTile, n - c);
      for (std::size_t k = 0; k < N; ++k) {
        const Low* p = src[k] + off[k + 1] + c * step[k + 1];
        if (step[k + 1] == 1)
          cpu::convert_run(p, wide[k], m);
        else
          for (std::int64_t i = 0; i < m; ++i) wide[k][i] = to_float(p[i * step[k + 1]]);
      }
      float* r = wide[N];  // the f32 kernel's own vectorised loop over the tile
      if constexpr (N == 1)
        map_dense(r, wide[0], m, f);
      else if constexpr (N == 2)
        map_dense(r, wide[0], wide[1], m, f);
      else
        map_dense(r, wide[0], wide[1], wide[2], m, f);
      Low* d = dst + off[0] + c * step[0];
      if (step[0] == 1)
        cpu::convert_run(r, d, m);
      else
        for (std::int64_t i = 0; i < m; ++i) d[i * step[0]] = from_double<Low>(r[i]);
    }
  });
}

// out[i] = f(in0[i], ...) with f computing in ComputeType<T>: map_kernel for f32 and f64, the
// widening map_low_kernel for bf16 and f16.
template <class T, std::size_t N, class F>
void map_elements(const std::vector<Tensor>& in, Tensor& out, F f) {
  if constexpr (std::is_same_v<ComputeType<T>, T>)
    map_kernel<T, N>(in, out, f);
  else
    map_low_kernel<T, N>(in, out, f);
}

// The kernels of one binary op; member templates over T so the registration macros can name them.
template <BinaryOp Op>
struct Binary {
  template <class T>
  static void kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
    map_elements<T, 2>(in, out[0], BinaryFn<Op, ComputeType<T>>{});
  }
  template <class T>
  static void scalar_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
    using C = ComputeType<T>;
    map_elements<T, 1>(in, out[0], ScalarFn<Op, C>{static_cast<C>(attrs.get_double("value"))});
  }
};

// The forward and backward kernels of one unary op.
template <UnaryOp Op>
struct Unary {
  template <class T>
  static void kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
    map_elements<T, 1>(in, out[0], ForwardFn<Op, ComputeType<T>>{});
  }
  template <class T>
  static void backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
    map_elements<T, 2>(in, out[0], BackwardFn<Op, ComputeType<T>>{});
  }
};

// gelu(h + b) and its gradient dy * gelu'(h + b), for h and a bias b broadcast against it: the
// fusion of a Linear layer's bias with its activation. The sum is never stored, so results equal
// add-then-gelu bit for bit.
template <class T>
void bias_gelu_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  map_elements<T, 2>(in, out[0], BiasGeluFn<ComputeType<T>>{});
}
template <class T>
void bias_gelu_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  using C = ComputeType<T>;
  map_elements<T, 3>(in, out[0], BiasGeluBackwardFn<C>{});
}

template <class T>
void relu_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using C = ComputeType<T>;
  map_elements<T, 2>(in, out[0], ReluBackwardFn<C>{static_cast<C>(attrs.get_double("negative_slope"))});
}

// One step of a chain over n dense elements: the loop of the step's own kernel.
template <class T>
void run_chain_step(const ChainStep& s, T* d, const T* a, const T* b, std::int64_t n) {
  const T v = static_cast<T>(s.value);
  switch (s.op) {
#define TROUPE_CHAIN_BINARY(op) \
  case ChainOp::op: return map_dense(d, a, b, n, BinaryFn<BinaryOp::op, T>{});
    TROUPE_BINARY_OPS(TROUPE_CHAIN_BINARY)
#undef TROUPE_CHAIN_BINARY
    case ChainOp::add_scalar: return map_dense(d, a, n, ScalarFn<BinaryOp::add, T>{v});
    case ChainOp::mul_scalar: return map_dense(d, a, n, ScalarFn<BinaryOp::mul, T>{v});
#define TROUPE_CHAIN_UNARY(op)                                               \
  case ChainOp::op: return map_dense(d, a, n, ForwardFn<UnaryOp::op, T>{}); \
  case ChainOp::op##_backward: return map_dense(d, a, b, n, BackwardFn<UnaryOp::op, T>{});
    TROUPE_SMOOTH_UNARY_OPS(TROUPE_CHAIN_UNARY)
#undef TROUPE_CHAIN_UNARY
    case ChainOp::relu: return map_dense(d, a, n, ForwardFn<UnaryOp::relu, T>{});
    case ChainOp::relu_backward: return map_dense(d, a, b, n, ReluBackwardFn<T>{v});
    case ChainOp::bias_gelu: return map_dense(d, a, b, n, BiasGeluFn<T>{});
  }
}

// The chain over N inputs broadcast to the output: each innermost run goes in tiles of kTile
// elements; a strided or broadcast input is gathered into its tile, each step writes its own tile
// (the last writes the output directly where it is dense), so intermediates stay in cache. The
// output may be an input's buffer (in place): the last step reads each element before writing it.
template <class T, std::size_t N>
void run_chain(const std::vector<Tensor>& in, Tensor& out, const std::vector<ChainStep>& steps) {
  constexpr std::int64_t kTile = 256;
  const std::size_t last = steps.size() - 1;
  walk_runs<T, N>(in, out, static_cast<double>(steps.size()), [&](T* dst, const std::array<const T*, N>& src, auto off,
                                                                 auto step, std::int64_t n) {
    alignas(64) T tiles[(kMaxChainInputs + kMaxChainSteps) * kTile];
    for (std::int64_t c = 0; c < n; c += kTile) {
      const std::int64_t m = std::min(kTile, n - c);
      std::array<const T*, kMaxChainInputs + kMaxChainSteps> operand{};
      for (std::size_t k = 0; k < N; ++k) {
        const T* p = src[k] + off[k + 1] + c * step[k + 1];
        if (step[k + 1] == 1) {
          operand[k] = p;
          continue;
        }
        T* t = tiles + k * kTile;
        for (std::int64_t i = 0; i < m; ++i) t[i] = p[i * step[k + 1]];
        operand[k] = t;
      }
      T* out_run = dst + off[0] + c * step[0];
      for (std::size_t j = 0; j <= last; ++j) {
        const ChainStep& s = steps[j];
        T* d = j == last && step[0] == 1 ? out_run : tiles + (N + j) * kTile;
        run_chain_step(s, d, operand[static_cast<std::size_t>(s.a)], s.b >= 0 ? operand[static_cast<std::size_t>(s.b)] : nullptr, m);
        operand[N + j] = d;
      }
      if (step[0] != 1)
        for (std::int64_t i = 0; i < m; ++i) out_run[i * step[0]] = operand[N + last][i];
    }
  });
}

template <class T>
void elementwise_chain_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const std::vector<ChainStep> steps = chain_steps(attrs, in.size());
  switch (in.size()) {
    case 1: return run_chain<T, 1>(in, out[0], steps);
    case 2: return run_chain<T, 2>(in, out[0], steps);
    case 3: return run_chain<T, 3>(in, out[0], steps);
    default: return run_chain<T, 4>(in, out[0], steps);
  }
}

}  // namespace

// Every elementwise kernel but the chain has bf16 and f16 versions, computing in f32.
#define TROUPE_ELEMENT_KERNELS(op, fn)   \
  TROUPE_REGISTER_FLOAT_KERNELS(op, fn); \
  TROUPE_REGISTER_LOW_PRECISION_KERNELS(op, fn)
#define TROUPE_BINARY(op)                                    \
  TROUPE_ELEMENT_KERNELS(#op, Binary<BinaryOp::op>::kernel); \
  TROUPE_ELEMENT_KERNELS(#op "_scalar", Binary<BinaryOp::op>::scalar_kernel);
TROUPE_BINARY_OPS(TROUPE_BINARY)
#undef TROUPE_BINARY

#define TROUPE_UNARY(op)                                   \
  TROUPE_ELEMENT_KERNELS(#op, Unary<UnaryOp::op>::kernel); \
  TROUPE_ELEMENT_KERNELS(#op "_backward", Unary<UnaryOp::op>::backward_kernel);
TROUPE_SMOOTH_UNARY_OPS(TROUPE_UNARY)
#undef TROUPE_UNARY
TROUPE_ELEMENT_KERNELS("relu", Unary<UnaryOp::relu>::kernel);
TROUPE_ELEMENT_KERNELS("relu_backward", relu_backward_kernel);
TROUPE_ELEMENT_KERNELS("bias_gelu", bias_gelu_kernel);
TROUPE_ELEMENT_KERNELS("bias_gelu_backward", bias_gelu_backward_kernel);
TROUPE_REGISTER_FLOAT_KERNELS("elementwise_chain", elementwise_chain_kernel);
#undef TROUPE_ELEMENT_KERNELS

}  // namespace troupe::kernels
