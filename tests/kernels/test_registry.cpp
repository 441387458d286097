// The kernel registry: lookup by (op, device, dtype) and the errors when something is missing.
#include <gtest/gtest.h>

#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/registry.hpp"

using namespace troupe;

TEST(KernelRegistry, FindsRegisteredKernels) {
  auto& r = KernelRegistry::instance();
  EXPECT_TRUE(r.contains("add", DeviceKind::cpu, DType::f32));
  EXPECT_TRUE(r.contains("matmul", DeviceKind::cpu, DType::bf16));
  EXPECT_FALSE(r.contains("add", DeviceKind::cpu, DType::u8));
}

TEST(KernelRegistry, MissingKernelNamesOpDeviceAndDtype) {
  try {
    // The fused chain computes in f32 or f64 only, on any device.
    KernelRegistry::instance().find("elementwise_chain", DeviceKind::cuda, DType::f16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::missing_kernel);
    const std::string m = e.what();
    EXPECT_NE(m.find("'elementwise_chain'"), std::string::npos) << m;
    EXPECT_NE(m.find("'cuda'"), std::string::npos) << m;
    EXPECT_NE(m.find("'f16'"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu/f32"), std::string::npos) << m;  // lists what exists
  }
  EXPECT_THROW(KernelRegistry::instance().find("no_such_op", DeviceKind::cpu, DType::f32), Error);
}

TEST(KernelRegistry, DuplicateRegistrationIsRefused) {
  auto fn = KernelRegistry::instance().find("add", DeviceKind::cpu, DType::f32);
  EXPECT_THROW(KernelRegistry::instance().add("add", DeviceKind::cpu, DType::f32, fn), Error);
}

TEST(Attrs, TypedAccessAndErrors) {
  Attrs a;
  a.set("axis", std::int64_t{2}).set("eps", 1e-5).set("stride", std::vector<std::int64_t>{1, 2});
  EXPECT_EQ(a.get_int("axis"), 2);
  EXPECT_EQ(a.get_double("eps"), 1e-5);
  EXPECT_EQ(a.get_ints("stride")[1], 2);
  EXPECT_THROW(a.get_int("eps"), Error);
  EXPECT_THROW(a.get_double("missing"), Error);
}
