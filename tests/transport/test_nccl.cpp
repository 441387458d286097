// The NCCL backend on the GPUs of this machine: a single-rank group (the bootstrap of a one-rank
// job) reduces, gathers and broadcasts CUDA tensors, and refuses host tensors by name. Skips
// without a CUDA device (fails under TROUPE_REQUIRE_GPU=1). (Several ranks need one GPU each.)
#include <gtest/gtest.h>

#include "gpu.hpp"
#include "troupe/kernels/cuda.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/nccl.hpp"

using namespace troupe;
using namespace troupe::transport;

TEST(Nccl, SingleRankCollectivesOnTheGpu) {
  TROUPE_REQUIRE_GPU();
  JobInfo job;  // one rank
  Bootstrap boot(job, std::chrono::seconds(10));
  NcclGroup g(boot, 0);
  EXPECT_EQ(g.size(), 1);
  Tensor x = Tensor::full({1031}, 2.5).to(Device::cuda(0));
  g.all_reduce(x, ReduceOp::mean);
  for (float v : x.to(Device::cpu()).to_vector<float>()) EXPECT_EQ(v, 2.5f);
  const Tensor gathered = g.all_gather(Tensor::full({3, 2}, 1.0).to(Device::cuda(0)));
  EXPECT_EQ(gathered.shape(), (Shape{3, 2}));
  Tensor b = Tensor::full({5}, 7.0).to(Device::cuda(0));
  g.broadcast(b, 0);
  EXPECT_EQ(b.to(Device::cpu()).to_vector<float>()[4], 7.0f);
  EXPECT_THROW(g.all_reduce(Tensor::zeros({4})), Error);  // a host tensor
  EXPECT_THROW(g.broadcast(b, 1), Error);                 // no such root
}
