// The device parity suite: each CUDA kernel against the CPU kernel of the same name on the same
// inputs (odd sizes, broadcast operands and strided views), in f32, f64, bf16 and f16, within a
// bound per dtype on the error relative to the result's scale. Needs a GPU (tests/gpu.hpp); that
// every CPU kernel of a family has its CUDA twin is checked in every CUDA build, GPU or not.
#include <gtest/gtest.h>

#include <string>

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

// Runs kernel `name` on the CPU and on cuda:0 with the same inputs and attributes; returns the
// error of the GPU's result relative to the CPU's scale. Inputs are given on the host in their
// dtype; `view` transposes input 0 (dims 0 and 1) on each device, so kernels meet strided inputs.
double parity(const std::string& name, const std::vector<Tensor>& inputs, const Shape& out_shape, const Attrs& attrs = {},
              bool view = false) {
  const Device gpu = Device::cuda(0);
  std::vector<Tensor> host_in = inputs, gpu_in;
  for (const Tensor& t : inputs) gpu_in.push_back(t.to(gpu));
  if (view) {
    host_in[0] = host_in[0].transpose(0, 1);
    gpu_in[0] = gpu_in[0].transpose(0, 1);
  }
  const DType dtype = inputs[0].dtype();
  std::vector<Tensor> host_out{Tensor::empty(out_shape, dtype)}, gpu_out{Tensor::empty(out_shape, dtype, gpu)};
  dispatch(name, host_in, host_out, attrs);
  dispatch(name, gpu_in, gpu_out, attrs);
  return scaled_max_error(gpu_out[0].to(Device::cpu()).to(DType::f64), host_out[0].to(DType::f64));
}

// A host tensor of `shape` in `dtype`, uniform in [low, high).
Tensor input(const Shape& shape, std::uint64_t seed, DType dtype, double low = -2, double high = 2) {
  return random_tensor(shape, seed, low, high).to(dtype);
}

// Positive inputs for the ops whose domain is (div's divisor, log, sqrt, rsqrt).
bool needs_positive(const std::string& op) { return op == "div" || op == "log" || op == "sqrt" || op == "rsqrt"; }

}  // namespace

TEST(CudaParity, EveryElementwiseKernelHasACudaTwin) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  const KernelRegistry& r = KernelRegistry::instance();
  std::vector<std::string> names{"relu", "relu_backward", "bias_gelu", "bias_gelu_backward"};
#define TROUPE_NAMES_BINARY(op) names.push_back(#op), names.push_back(#op "_scalar");
  TROUPE_BINARY_OPS(TROUPE_NAMES_BINARY)
#undef TROUPE_NAMES_BINARY
#define TROUPE_NAMES_UNARY(op) names.push_back(#op), names.push_back(#op "_backward");
  TROUPE_SMOOTH_UNARY_OPS(TROUPE_NAMES_UNARY)
#undef TROUPE_NAMES_UNARY
  for (const std::string& name : names)
    for (DType dtype : kDTypes)
      if (r.contains(name, DeviceKind::cpu, dtype))
        EXPECT_TRUE(r.contains(name, DeviceKind::cuda, dtype)) << name << " in " << dtype_name(dtype);
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
