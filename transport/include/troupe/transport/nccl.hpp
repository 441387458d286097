#pragma once
// The NCCL backend: collectives among the GPUs of a job, one GPU per rank, on CUDA tensors. Built
// when CUDA and NCCL are found (TROUPE_HAVE_NCCL); the NCCL unique id travels through the Bootstrap.
// Each call runs on the group's own stream and returns when the collective is complete.

#include <memory>

#include "troupe/kernels/tensor.hpp"
#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::transport {

/// An NCCL communicator over the ranks of a job.
class NcclGroup {
 public:
  /// Collective: every rank of `bootstrap`'s job creates its group, each on its own `device`.
  NcclGroup(Bootstrap& bootstrap, int device);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  int rank() const;
  int size() const;
  /// In place over a dense f32/f64 tensor on this group's device.
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum);
  /// Every rank's tensor concatenated along dim 0, on this group's device.
  Tensor all_gather(const Tensor& tensor);
  /// Root's tensor into every rank's `tensor`.
  void broadcast(const Tensor& tensor, int root);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::transport
