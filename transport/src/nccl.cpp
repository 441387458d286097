#include "troupe/transport/nccl.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "troupe/kernels/error.hpp"

namespace troupe::transport {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  TROUPE_CHECK(e == cudaSuccess, runtime, "NCCL group: ", what, " failed: ", cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what, int rank) {
  TROUPE_CHECK(r == ncclSuccess, runtime, "rank ", rank, ": NCCL ", what, " failed: ", ncclGetErrorString(r),
               r == ncclRemoteError || r == ncclSystemError ? " (a peer may have died)" : "");
}

ncclDataType_t nccl_type(const Tensor& t, const char* op) {
  if (t.dtype() == DType::f32) return ncclFloat32;
  if (t.dtype() == DType::f64) return ncclFloat64;
  fail(ErrorKind::dtype_mismatch, op, ": NCCL reduces f32 or f64, got ", t.str());
}

}  // namespace

struct NcclGroup::Impl {
  int rank = 0, size = 1, device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;

  void check_tensor(const char* op, const Tensor& t) const {
    TROUPE_CHECK(t.defined() && t.device() == Device::cuda(device) && t.is_contiguous(), invalid_argument, op,
                 ": needs a dense tensor on cuda:", device, " (rank ", rank, "'s GPU), got ",
                 t.defined() ? t.str() : std::string("an undefined tensor"));
  }
  void wait(const char* op) {
    check_cuda(cudaStreamSynchronize(stream), op);
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm, &async), "status", rank);
    check_nccl(async, op, rank);
  }
};

NcclGroup::NcclGroup(Bootstrap& bootstrap, int device) : impl_(std::make_unique<Impl>()) {
  impl_->rank = bootstrap.rank();
  impl_->size = bootstrap.size();
  impl_->device = device;
  check_cuda(cudaSetDevice(device), "selecting the GPU");
  ncclUniqueId id{};
  if (impl_->rank == 0) check_nccl(ncclGetUniqueId(&id), "unique id", 0);
  const std::string mine = impl_->rank == 0 ? std::string(reinterpret_cast<const char*>(&id), sizeof id) : std::string();
  const auto all = bootstrap.all_gather(mine);
  std::memcpy(&id, all[0].data(), sizeof id);
  check_nccl(ncclCommInitRank(&impl_->comm, impl_->size, id, impl_->rank), "init", impl_->rank);
  check_cuda(cudaStreamCreate(&impl_->stream), "creating the stream");  // blocking: ordered after kernels
}

NcclGroup::~NcclGroup() {
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
  if (impl_->comm) ncclCommDestroy(impl_->comm);
}

int NcclGroup::rank() const { return impl_->rank; }
int NcclGroup::size() const { return impl_->size; }

void NcclGroup::all_reduce(const Tensor& t, ReduceOp op) {
  impl_->check_tensor("all_reduce", t);
  check_cuda(cudaSetDevice(impl_->device), "selecting the GPU");
  check_nccl(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()), nccl_type(t, "all_reduce"),
                           op == ReduceOp::mean ? ncclAvg : ncclSum, impl_->comm, impl_->stream),
             "all_reduce", impl_->rank);
  impl_->wait("all_reduce");
}

Tensor NcclGroup::all_gather(const Tensor& t) {
  impl_->check_tensor("all_gather", t);
  TROUPE_CHECK(t.dim() > 0, invalid_argument, "all_gather: needs a tensor with a dim 0");
  Shape shape = t.shape();
  shape[0] *= impl_->size;
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  check_cuda(cudaSetDevice(impl_->device), "selecting the GPU");
  check_nccl(ncclAllGather(t.raw_data(), out.raw_data(), t.nbytes(), ncclUint8, impl_->comm, impl_->stream), "all_gather",
             impl_->rank);
  impl_->wait("all_gather");
  return out;
}

void NcclGroup::broadcast(const Tensor& t, int root) {
  impl_->check_tensor("broadcast", t);
  TROUPE_CHECK(root >= 0 && root < impl_->size, invalid_argument, "broadcast: root ", root, " is not a rank of this ",
               impl_->size, "-rank job");
  check_cuda(cudaSetDevice(impl_->device), "selecting the GPU");
  check_nccl(ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, impl_->comm, impl_->stream),
             "broadcast", impl_->rank);
  impl_->wait("broadcast");
}

}  // namespace troupe::transport
