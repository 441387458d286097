// The device parity suite: each CUDA kernel against the CPU kernel of the same name on the same
// inputs (odd sizes, broadcast operands and strided views), in f32, f64, bf16 and f16, within a
// bound per dtype on the error relative to the result's scale. Needs a GPU (tests/gpu.hpp); that
// every CPU kernel of a family has its CUDA twin is checked in every CUDA build, GPU or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "gpu.hpp"
#include "kernels/reference.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/registry.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

const DType kDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

// The largest error relative to the result's scale a CUDA kernel may show against the CPU's:
// both round once per element in the dtype; the f32 math libraries differ in the last bits (the
// CPU's gelu uses a vectorising exp), and a low-precision result may round the other way.
double bound(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-12;
    case DType::f32: return 2e-6;
    case DType::f16: return 2e-3;
    default: return 1.6e-2;  // bf16: one step of 8 bits
  }
}

// One output of a kernel: its shape and dtype.
struct Out {
  Shape shape;
  DType dtype;
};

// Runs kernel `name` on the CPU and on cuda:0 with the same inputs and attributes, into outputs of
// `outs`' shapes and dtypes; returns the largest of the outputs' errors relative to the CPU
// result's scale. Inputs are given on the host; `view` transposes input 0 (dims 0 and 1) on each
// device, so kernels meet strided inputs.
double parity(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Out>& outs,
              const Attrs& attrs = {}, bool view = false) {
  const Device gpu = Device::cuda(0);
  std::vector<Tensor> host_in = inputs, gpu_in;
  for (const Tensor& t : inputs) gpu_in.push_back(t.to(gpu));
  if (view) {
    host_in[0] = host_in[0].transpose(0, 1);
    gpu_in[0] = gpu_in[0].transpose(0, 1);
  }
  std::vector<Tensor> host_out, gpu_out;
  for (const Out& o : outs) {
    host_out.push_back(Tensor::empty(o.shape, o.dtype));
    gpu_out.push_back(Tensor::empty(o.shape, o.dtype, gpu));
  }
  dispatch(name, host_in, host_out, attrs);
  dispatch(name, gpu_in, gpu_out, attrs);
  double worst = 0;
  for (std::size_t k = 0; k < outs.size(); ++k)
    worst = std::max(worst, scaled_max_error(gpu_out[k].to(Device::cpu()).to(DType::f64), host_out[k].to(DType::f64)));
  return worst;
}

// parity() of a kernel with one output of input 0's dtype.
double parity(const std::string& name, const std::vector<Tensor>& inputs, const Shape& out_shape, const Attrs& attrs = {},
              bool view = false) {
  return parity(name, inputs, std::vector<Out>{{out_shape, inputs[0].dtype()}}, attrs, view);
}

// A host tensor of `shape` in `dtype`, uniform in [low, high).
Tensor input(const Shape& shape, std::uint64_t seed, DType dtype, double low = -2, double high = 2) {
  return random_tensor(shape, seed, low, high).to(dtype);
}

// Positive inputs for the ops whose domain is (div's divisor, log, sqrt, rsqrt).
bool needs_positive(const std::string& op) { return op == "div" || op == "log" || op == "sqrt" || op == "rsqrt"; }

}  // namespace

TEST(CudaParity, EveryKernelOfTheCudaFamiliesHasACudaTwin) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  const KernelRegistry& r = KernelRegistry::instance();
  std::vector<std::string> names{"relu",    "relu_backward",    "bias_gelu",      "bias_gelu_backward",
                                 "reduce",  "softmax",          "softmax_backward", "causal_softmax",
                                 "causal_softmax_backward", "layernorm", "add_layernorm", "layernorm_backward",
                                 "cross_entropy", "cross_entropy_backward", "embedding", "embedding_backward",
                                 "squared_norm", "scale_", "sgd_update_", "adamw_update_", "matmul", "matmul_bias",
                                 "causal_mask", "causal_attention", "causal_attention_backward"};
#define TROUPE_NAMES_BINARY(op) names.push_back(#op), names.push_back(#op "_scalar");
  TROUPE_BINARY_OPS(TROUPE_NAMES_BINARY)
#undef TROUPE_NAMES_BINARY
#define TROUPE_NAMES_UNARY(op) names.push_back(#op), names.push_back(#op "_backward");
  TROUPE_SMOOTH_UNARY_OPS(TROUPE_NAMES_UNARY)
#undef TROUPE_NAMES_UNARY
  for (const std::string& name : names)
    for (DType dtype : kDTypes)
      if (r.contains(name, DeviceKind::cpu, dtype)) {
        EXPECT_TRUE(r.contains(name, DeviceKind::cuda, dtype)) << name << " in " << dtype_name(dtype);
      }
}

TEST(CudaParity, BinaryOpsWithBroadcastAndStridedOperands) {
  TROUPE_REQUIRE_GPU();
  for (DType dtype : kDTypes)
    for (const char* op : {"add", "sub", "mul", "div"}) {
      SCOPED_TRACE(std::string(op) + " in " + dtype_name(dtype));
      const double low = needs_positive(op) ? 0.5 : -2;
      const Tensor a = input({37, 65}, 1, dtype), b = input({37, 65}, 2, dtype, low);
      EXPECT_LE(parity(op, {a, b}, {37, 65}), bound(dtype)) << "dense";
      EXPECT_LE(parity(op, {a, input({65}, 3, dtype, low)}, {37, 65}), bound(dtype)) << "a row broadcast";
      EXPECT_LE(parity(op, {a, input({37, 1}, 4, dtype, low)}, {37, 65}), bound(dtype)) << "a column broadcast";
      EXPECT_LE(parity(op, {input({65, 37}, 5, dtype), b}, {37, 65}, {}, true), bound(dtype)) << "a transposed view";
      EXPECT_LE(parity(std::string(op) + "_scalar", {a}, {37, 65}, Attrs().set("value", 0.75)), bound(dtype)) << "scalar";
      EXPECT_LE(parity(op, {input({3, 1, 5, 7}, 6, dtype), input({4, 1, 7}, 7, dtype, low)}, {3, 4, 5, 7}), bound(dtype))
          << "both broadcast, rank 4";
    }
}

TEST(CudaParity, UnaryOpsAndTheirBackward) {
  TROUPE_REQUIRE_GPU();
  std::vector<std::string> ops{"relu"};
#define TROUPE_NAMES_UNARY(op) ops.push_back(#op);
  TROUPE_SMOOTH_UNARY_OPS(TROUPE_NAMES_UNARY)
#undef TROUPE_NAMES_UNARY
  for (DType dtype : kDTypes)
    for (const std::string& op : ops) {
      SCOPED_TRACE(op + " in " + dtype_name(dtype));
      const double low = needs_positive(op) ? 0.5 : -3;
      const Tensor x = input({129, 33}, 8, dtype, low, 3), g = input({129, 33}, 9, dtype);
      EXPECT_LE(parity(op, {x}, {129, 33}), bound(dtype)) << "forward";
      EXPECT_LE(parity(op, {input({33, 129}, 10, dtype, low, 3)}, {129, 33}, {}, true), bound(dtype)) << "forward, strided";
      if (op == "relu") {
        EXPECT_LE(parity("relu_backward", {g, x}, {129, 33}, Attrs().set("negative_slope", 0.01)), bound(dtype));
      } else {
        EXPECT_LE(parity(op + "_backward", {g, x}, {129, 33}), bound(dtype)) << "backward";
      }
    }
}

TEST(CudaParity, BiasGeluAndItsBackward) {
  TROUPE_REQUIRE_GPU();
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor h = input({45, 96}, 11, dtype), b = input({96}, 12, dtype), g = input({45, 96}, 13, dtype);
    EXPECT_LE(parity("bias_gelu", {h, b}, {45, 96}), bound(dtype));
    EXPECT_LE(parity("bias_gelu_backward", {g, h, b}, {45, 96}), bound(dtype));
  }
}

// Element copies on the device: a strided view made dense, dtype conversions (exact, as on the
// host: both round to nearest even) and a broadcast copy.
TEST(CudaParity, CopiesOfViewsConversionsAndBroadcasts) {
  TROUPE_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  for (DType from : kDTypes)
    for (DType to : kDTypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " to " + dtype_name(to));
      const Tensor x = input({33, 70}, 14, from);
      const Tensor on_gpu = x.to(gpu).transpose(0, 1).to(to);  // strided and converted on the device
      EXPECT_EQ(on_gpu.device(), gpu);
      EXPECT_EQ(scaled_max_error(on_gpu.to(Device::cpu()).to(DType::f64), x.transpose(0, 1).to(to).to(DType::f64)), 0.0);
    }
  Tensor rows = Tensor::zeros({4, 5}, DType::f32, gpu);
  const Tensor row = input({5}, 15, DType::f32);
  rows.copy_from(row.to(gpu));
  Tensor expected = Tensor::zeros({4, 5});
  expected.copy_from(row);
  EXPECT_EQ(values(rows), values(expected));
}

// Sums, means and maxima over the middle of [outer, extent, inner], into the input's dtype and f32.
TEST(CudaParity, Reductions) {
  TROUPE_REQUIRE_GPU();
  for (DType dtype : kDTypes)
    for (std::int64_t mode : {0, 1, 2})
      for (const auto& [outer, extent, inner] : {std::tuple{3LL, 257LL, 1LL}, std::tuple{1LL, 100LL, 301LL}, std::tuple{5LL, 7LL, 9LL}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + ", mode " + std::to_string(mode) + ", [" + std::to_string(outer) +
                     ", " + std::to_string(extent) + ", " + std::to_string(inner) + "]");
        const Tensor x = input({outer, extent, inner}, 16, dtype);
        const Attrs attrs = Attrs().set("extent", extent).set("inner", inner).set("mode", mode);
        EXPECT_LE(parity("reduce", {x}, {outer, inner}, attrs), bound(dtype));
        // Into f32 (a low-precision input's partial sums).
        const Device gpu = Device::cuda(0);
        std::vector<Tensor> host_out{Tensor::empty({outer, inner}, DType::f32)}, gpu_out{Tensor::empty({outer, inner}, DType::f32, gpu)};
        dispatch("reduce", {x}, host_out, attrs);
        dispatch("reduce", {x.to(gpu)}, gpu_out, attrs);
        EXPECT_LE(scaled_max_error(gpu_out[0].to(Device::cpu()), host_out[0]), bound(DType::f32));
      }
}

// Softmax and log-softmax over the last axis and a middle one, their backward, and attention's
// causal softmax (scaled and masked scores) with its backward.
TEST(CudaParity, SoftmaxesAndTheirBackward) {
  TROUPE_REQUIRE_GPU();
  for (DType dtype : kDTypes)
    for (std::int64_t log : {0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (log ? ", log-softmax" : ", softmax"));
      const Tensor x = input({6, 37, 129}, 17, dtype, -4, 4), g = input({6, 37, 129}, 18, dtype);
      for (std::int64_t axis : {2, 1}) {
        const Attrs attrs = Attrs().set("axis", axis).set("log", log);
        EXPECT_LE(parity("softmax", {x}, {6, 37, 129}, attrs), bound(dtype)) << "axis " << axis;
        std::vector<Tensor> y{Tensor::empty({6, 37, 129}, dtype)};
        dispatch("softmax", {x}, y, attrs);  // the backward reads the forward's output
        EXPECT_LE(parity("softmax_backward", {g, y[0]}, {6, 37, 129}, attrs), bound(dtype)) << "axis " << axis;
      }
    }
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + ", causal");
    const Tensor scores = input({2, 3, 33, 33}, 19, dtype, -4, 4), g = input({2, 3, 33, 33}, 20, dtype);
    const Attrs attrs = Attrs().set("scale", 0.125);
    EXPECT_LE(parity("causal_mask", {scores}, {2, 3, 33, 33}, Attrs().set("fill", -1e4)), bound(dtype));
    EXPECT_LE(parity("causal_softmax", {scores}, {2, 3, 33, 33}, attrs), bound(dtype));
    std::vector<Tensor> y{Tensor::empty({2, 3, 33, 33}, dtype)};
    dispatch("causal_softmax", {scores}, y, attrs);
    EXPECT_LE(parity("causal_softmax_backward", {g, y[0]}, {2, 3, 33, 33}, attrs), bound(dtype));
  }
}

// Layer normalisation (y in the rows' dtype, and bf16 for f32 rows), with a residual added first,
// and its backward with another gradient of x added.
TEST(CudaParity, LayerNormsAndTheirBackward) {
  TROUPE_REQUIRE_GPU();
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;
    const std::int64_t rows = 77, d = 300;
    const Tensor x = input({7, 11, d}, 21, dtype), r = input({11, d}, 22, dtype);
    const Tensor gamma = input({d}, 23, dtype, 0.5, 1.5), beta = input({d}, 24, dtype);
    const Attrs eps = Attrs().set("eps", 1e-5);
    EXPECT_LE(parity("layernorm", {x, gamma, beta}, {{{7, 11, d}, dtype}, {{rows}, stats}, {{rows}, stats}}, eps), bound(dtype));
    if (dtype == DType::f32) {
      EXPECT_LE(parity("layernorm", {x, gamma, beta}, {{{7, 11, d}, DType::bf16}, {{rows}, stats}, {{rows}, stats}}, eps),
                bound(DType::bf16))
          << "bf16 y of f32 rows";
    }
    EXPECT_LE(parity("add_layernorm", {x, r, gamma, beta},
                     {{{7, 11, d}, dtype}, {{7, 11, d}, dtype}, {{rows}, stats}, {{rows}, stats}}, eps),
              bound(dtype));
    // The backward from the CPU forward's statistics.
    std::vector<Tensor> forward{Tensor::empty({7, 11, d}, dtype), Tensor::empty({rows}, stats), Tensor::empty({rows}, stats)};
    dispatch("layernorm", {x, gamma, beta}, forward, eps);
    const Tensor dy = input({7, 11, d}, 25, dtype), more = input({7, 11, d}, 26, dtype);
    const std::vector<Out> grads{{{7, 11, d}, dtype}, {{d}, dtype}, {{d}, dtype}};
    EXPECT_LE(parity("layernorm_backward", {dy, x, gamma, forward[1], forward[2]}, grads), bound(dtype));
    EXPECT_LE(parity("layernorm_backward", {dy, x, gamma, forward[1], forward[2], more}, grads), bound(dtype)) << "with more";
  }
}

// Token ids: `n` values in [low, high), dense i64 on the host.
Tensor ids(std::int64_t n, std::int64_t low, std::int64_t high, std::uint64_t seed) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    v.push_back(low + static_cast<std::int64_t>((seed >> 33) % static_cast<std::uint64_t>(high - low)));
  }
  return Tensor::from_vector(v, {n});
}

TEST(CudaParity, CrossEntropyAndItsBackward) {
  TROUPE_REQUIRE_GPU();
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const DType loss = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Tensor logits = input({97, 1003}, 27, dtype, -6, 6), targets = ids(97, 0, 1003, 28);
    EXPECT_LE(parity("cross_entropy", {logits, targets}, {{{}, loss}}), bound(dtype == DType::f64 ? dtype : DType::f32));
    const Tensor grad = Tensor::scalar(0.75, loss);
    EXPECT_LE(parity("cross_entropy_backward", {logits, targets, grad}, {97, 1003}), bound(dtype));
  }
}

// The lookup and the gradient's scatter-add, over a whole table and over a slice of one (rows from
// "first", ids outside it giving zero rows and adding nothing), with repeated ids.
TEST(CudaParity, EmbeddingAndItsBackward) {
  TROUPE_REQUIRE_GPU();
  for (DType dtype : kDTypes)
    for (std::int64_t first : {0, 40}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", first row " + std::to_string(first));
      const Tensor table = input({100, 65}, 29, dtype), tokens = ids(333, 0, 140, 30);
      const Attrs attrs = Attrs().set("first", first);
      EXPECT_LE(parity("embedding", {table, tokens}, {333, 65}, attrs), bound(dtype));
      EXPECT_LE(parity("embedding_backward", {input({333, 65}, 31, dtype), tokens}, {100, 65}, attrs), bound(dtype));
    }
}

// The squared norm's (hi, lo) pair, and the in-place updates: scale_, SGD with momentum and AdamW
// leave the same parameters and state on both devices.
TEST(CudaParity, NormsAndOptimizerUpdates) {
  TROUPE_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_LE(parity("squared_norm", {input({300001}, 32, dtype)}, Shape{2}), bound(dtype));
    // Runs in-place kernel `name` on host copies and device copies of `state`; compares them after.
    const auto in_place = [&](const std::string& name, const std::vector<Tensor>& state, const Attrs& attrs) {
      std::vector<Tensor> host, device, none;
      for (const Tensor& t : state) {
        host.push_back(t.clone());
        device.push_back(t.to(gpu));
      }
      dispatch(name, host, none, attrs);
      dispatch(name, device, none, attrs);
      double worst = 0;
      for (std::size_t k = 0; k < state.size(); ++k)
        worst = std::max(worst, scaled_max_error(device[k].to(Device::cpu()).to(DType::f64), host[k].to(DType::f64)));
      return worst;
    };
    const Tensor p = input({1000, 33}, 33, dtype), g = input({1000, 33}, 34, dtype);
    const Tensor m = input({1000, 33}, 35, dtype, -0.1, 0.1), v = input({1000, 33}, 36, dtype, 0, 0.01);
    EXPECT_LE(in_place("scale_", {p}, Attrs().set("scale", 0.3)), bound(dtype));
    EXPECT_LE(in_place("sgd_update_", {p, g, m},
                       Attrs().set("lr", 0.1).set("momentum", 0.9).set("weight_decay", 0.01).set("dampening", 0.0)
                           .set("nesterov", std::int64_t{1}).set("first_step", std::int64_t{0}).set("grad_scale", 0.5)),
              bound(dtype));
    EXPECT_LE(in_place("adamw_update_", {p, g, m, v},
                       Attrs().set("lr", 1e-3).set("beta1", 0.9).set("beta2", 0.999).set("eps", 1e-8)
                           .set("weight_decay", 0.01).set("step", std::int64_t{7}).set("grad_scale", 1.0)),
              bound(dtype));
  }
}

// Products: plain, with a transposed operand (a flag, or a view), a batch broadcast against one
// matrix and batches on both sides, odd sizes; bf16 and f16 operands written in their dtype and as
// f32; the bias epilogue. Their sums run in other orders on the two devices, so f32 and f64 allow
// the error of a k-term sum.
TEST(CudaParity, ProductsAndTheBiasEpilogue) {
  TROUPE_REQUIRE_GPU();
  const auto product_bound = [](DType d) { return d == DType::f64 ? 1e-12 : d == DType::f32 ? 1e-5 : bound(d); };
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto flags = [](bool ta, bool tb) {
      return Attrs().set("trans_a", std::int64_t{ta}).set("trans_b", std::int64_t{tb});
    };
    const Tensor a = input({37, 129}, 37, dtype), b = input({129, 65}, 38, dtype);
    EXPECT_LE(parity("matmul", {a, b}, {37, 65}, flags(false, false)), product_bound(dtype)) << "plain";
    EXPECT_LE(parity("matmul", {input({129, 37}, 39, dtype), b}, {37, 65}, flags(true, false)), product_bound(dtype))
        << "trans_a";
    EXPECT_LE(parity("matmul", {a, input({65, 129}, 40, dtype)}, {37, 65}, flags(false, true)), product_bound(dtype))
        << "trans_b";
    EXPECT_LE(parity("matmul", {input({129, 37}, 41, dtype), b}, {37, 65}, flags(false, false), true), product_bound(dtype))
        << "a transposed view";
    EXPECT_LE(parity("matmul", {input({3, 5, 37, 129}, 42, dtype), b}, {3, 5, 37, 65}, flags(false, false)),
              product_bound(dtype))
        << "a batch against one matrix";
    EXPECT_LE(parity("matmul", {input({3, 1, 37, 129}, 43, dtype), input({4, 129, 65}, 44, dtype)}, {3, 4, 37, 65},
                     flags(false, false)),
              product_bound(dtype))
        << "batches broadcast against each other";
    EXPECT_LE(parity("matmul_bias", {a, b, input({65}, 45, dtype)}, {37, 65}, flags(false, false)), product_bound(dtype))
        << "bias";
    if (dtype == DType::bf16 || dtype == DType::f16) {
      EXPECT_LE(parity("matmul", {a, b}, std::vector<Out>{{{37, 65}, DType::f32}}, flags(false, false)), 1e-5)
          << "written as f32";
      EXPECT_LE(parity("matmul_bias", {a, b, input({65}, 46, DType::f32)}, std::vector<Out>{{{37, 65}, DType::f32}},
                       flags(false, false)),
                1e-5)
          << "written as f32, with an f32 bias";
    }
  }
}

// Fused causal attention and its backward, over heads whose length spans several tiles of keys and
// whose width is not a multiple of a warp; the backward from the CPU forward's y and lse. Sums run
// in other orders on the two devices (products' bound).
TEST(CudaParity, FusedCausalAttentionAndItsBackward) {
  TROUPE_REQUIRE_GPU();
  for (DType dtype : kDTypes)
    for (std::int64_t d : {48, 64}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", D " + std::to_string(d));
      const double b = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-5 : bound(dtype);
      const DType acc = dtype == DType::f64 ? DType::f64 : DType::f32;
      const Tensor q = input({6, 70, d}, 47, dtype), k = input({6, 70, d}, 48, dtype), v = input({6, 70, d}, 49, dtype);
      const Attrs attrs = Attrs().set("scale", 1.0 / std::sqrt(static_cast<double>(d)));
      EXPECT_LE(parity("causal_attention", {q, k, v}, {{{6, 70, d}, dtype}, {{6, 70}, acc}}, attrs), b);
      std::vector<Tensor> forward{Tensor::empty({6, 70, d}, dtype), Tensor::empty({6, 70}, acc)};
      dispatch("causal_attention", {q, k, v}, forward, attrs);
      const Tensor dy = input({6, 70, d}, 50, dtype);
      EXPECT_LE(parity("causal_attention_backward", {dy, q, k, v, forward[0], forward[1]},
                       {{{6, 70, d}, dtype}, {{6, 70, d}, dtype}, {{6, 70, d}, dtype}}, attrs),
                b);
    }
}
