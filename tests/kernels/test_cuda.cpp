// The CUDA backend. Needs a GPU: every test that runs kernels skips cleanly when none is present
// (and fails under TROUPE_REQUIRE_GPU=1, tests/gpu.hpp).
#include <gtest/gtest.h>

#include "gpu.hpp"
#include "kernels/reference.hpp"
#include "troupe/kernels/cuda.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/embedding.hpp"
#include "troupe/kernels/loss.hpp"
#include "troupe/kernels/optim.hpp"

using namespace troupe;
using namespace troupe::test;

TEST(Cuda, RoundTripCopy) {
  TROUPE_REQUIRE_GPU();
  Tensor x = random_tensor({37, 5}, 1);
  Tensor d = x.to(Device::cuda(0));
  EXPECT_EQ(d.device(), Device::cuda(0));
  EXPECT_EQ(values(d.to(Device::cpu())), values(x));
}

TEST(Cuda, AddMatchesHost) {
  TROUPE_REQUIRE_GPU();
  Tensor a = random_tensor({1000, 3}, 2), b = random_tensor({1000, 3}, 3);
  Tensor c = kernels::add(a.to(Device::cuda(0)), b.to(Device::cuda(0)));
  EXPECT_EQ(c.device(), Device::cuda(0));
  expect_close(c, values(kernels::add(a, b)), {1000, 3}, 0, 0);
}

TEST(Cuda, SquaredNormMatchesDoubleReference) {
  TROUPE_REQUIRE_GPU();
  Tensor x = random_tensor({1000003}, 4, -2, 2);
  double ref = 0;
  for (double v : values(x)) ref += v * v;
  EXPECT_NEAR(kernels::squared_norm(x.to(Device::cuda(0))), ref, 1e-6 * ref);
}

// embedding and cross_entropy have no CUDA kernels yet; their front ends must still put the outputs
// and the converted ids on the GPU, so the call fails as a missing kernel rather than a device mismatch,
// while ids out of range are still refused first.
TEST(Cuda, FrontEndsKeepEveryTensorOnTheInputsDevice) {
  TROUPE_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  Tensor ids = Tensor::from_vector<std::int32_t>({1, 0, 2}, {3}).to(gpu);
  auto kind_of = [](auto call) {
    try {
      call();
    } catch (const Error& e) {
      return e.kind();
    }
    ADD_FAILURE() << "expected an error";
    return ErrorKind::runtime;
  };
  EXPECT_EQ(kind_of([&] { kernels::embedding(random_tensor({4, 3}, 1).to(gpu), ids); }), ErrorKind::missing_kernel);
  EXPECT_EQ(kind_of([&] { kernels::cross_entropy(random_tensor({3, 4}, 2).to(gpu), ids); }),
            ErrorKind::missing_kernel);
  EXPECT_EQ(kind_of([&] { kernels::embedding(random_tensor({2, 3}, 1).to(gpu), ids); }), ErrorKind::out_of_range);
}

TEST(Cuda, MissingDeviceIsAClearError) {
  if (!cuda_built()) {
    try {
      Tensor::empty({2}, DType::f32, Device::cuda(0));
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    }
    return;
  }
  EXPECT_THROW(Tensor::empty({2}, DType::f32, Device::cuda(99)), Error);
}
