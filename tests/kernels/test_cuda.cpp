// The CUDA backend. Needs a GPU: every test that runs kernels skips cleanly when none is present
// (and fails under TROUPE_REQUIRE_GPU=1, tests/gpu.hpp).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "gpu.hpp"
#include "kernels/reference.hpp"
#include "troupe/kernels/cuda.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/embedding.hpp"
#include "troupe/kernels/loss.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/stream.hpp"

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

// The front ends of embedding and cross-entropy check the ids on a host copy and put the converted
// ids and the outputs on the inputs' device; ids out of range are refused before any kernel.
TEST(Cuda, FrontEndsKeepEveryTensorOnTheInputsDevice) {
  TROUPE_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor ids = Tensor::from_vector<std::int32_t>({1, 0, 2}, {3});
  const Tensor table = random_tensor({4, 3}, 1), logits = random_tensor({3, 4}, 2);
  const Tensor rows = kernels::embedding(table.to(gpu), ids.to(gpu));
  EXPECT_EQ(rows.device(), gpu);
  EXPECT_EQ(values(rows), values(kernels::embedding(table, ids)));
  const Tensor loss = kernels::cross_entropy(logits.to(gpu), ids.to(gpu));
  EXPECT_EQ(loss.device(), gpu);
  EXPECT_NEAR(loss.item(), kernels::cross_entropy(logits, ids).item(), 1e-6);
  try {
    kernels::embedding(random_tensor({2, 3}, 1).to(gpu), ids.to(gpu));
    ADD_FAILURE() << "an id out of range was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_range);
  }
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

namespace {

// Waits on this thread until `e` completes (10 s at most) and returns its failure, if any.
std::exception_ptr wait_for(const Event& e) {
  std::promise<std::exception_ptr> p;
  auto f = p.get_future();
  e.then([&p](std::exception_ptr error) { p.set_value(error); });
  EXPECT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "the event never completed";
  return f.get();
}

}  // namespace

// Kernels and copies under a CUDA stream's guard are queued on the GPU in order; a second CUDA
// stream waits for the first's event on the GPU; the host hears of completion through the event.
TEST(Cuda, StreamsQueueKernelsInOrderAndWaitForEachOtherOnTheGpu) {
  TROUPE_REQUIRE_GPU();
  auto first = make_cuda_stream(0, "cuda stream 0"), second = make_cuda_stream(0, "cuda stream 1");
  const Tensor a = random_tensor({4096, 33}, 5), b = random_tensor({4096, 33}, 6);
  const Tensor ga = a.to(Device::cuda(0)), gb = b.to(Device::cuda(0));
  Tensor sum, twice, back = Tensor::zeros({4096, 33});
  Event made, used;
  {
    const StreamGuard on(*first, 1);
    sum = kernels::add(ga, gb);
    made = first->record();
  }
  {
    const StreamGuard on(*second, 1);
    second->wait(made);
    twice = kernels::add(sum, sum);
    back.copy_from(twice);  // device to host, queued
    used = second->record();
  }
  EXPECT_FALSE(wait_for(used));
  EXPECT_TRUE(made.done());
  expect_close(back, values(kernels::mul(kernels::add(a, b), 2.0)), {4096, 33}, 1e-6, 1e-6);
}

// A CUDA stream waiting for a host stream's event holds its work until the event completes.
TEST(Cuda, ACudaStreamWaitsForAHostStreamsEvent) {
  TROUPE_REQUIRE_GPU();
  auto host = make_cpu_stream("host"), gpu = make_cuda_stream(0, "cuda stream 0");
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  host->enqueue([opened] { opened.wait(); });
  const Event held = host->record();
  const Tensor a = random_tensor({1000}, 7);
  Tensor out;
  Event done;
  {
    const StreamGuard on(*gpu, 1);
    gpu->wait(held);
    out = kernels::add(a.to(Device::cuda(0)), a.to(Device::cuda(0)));
    done = gpu->record();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.done());
  gate.set_value();
  EXPECT_FALSE(wait_for(done));
  expect_close(out, values(kernels::mul(a, 2.0)), {1000}, 1e-6, 1e-6);
}

TEST(Cuda, AStreamOnAMissingDeviceIsAClearError) {
  try {
    make_cuda_stream(cuda_device_count(), "absent");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), cuda_built() ? ErrorKind::device_mismatch : ErrorKind::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(cuda_device_count())), std::string::npos) << e.what();
  }
}
