#include "troupe/apps/parallel_job.hpp"

#include <cmath>
#include <cstdio>
#include <tuple>

#include "troupe/kernels/error.hpp"
#include "troupe/transport/subgroup.hpp"
#include "troupe/transport/ucx.hpp"

namespace troupe::apps {

ParallelJob::ParallelJob(int dp, int tp, bool zero) : dp_(dp), tp_(tp) {
  TROUPE_CHECK(dp >= 1, invalid_argument, "--dp must be >= 1, got ", dp);
  TROUPE_CHECK(tp >= 1, invalid_argument, "--tp must be >= 1, got ", tp);
  job_ = transport::JobInfo::from_environment();
  if (dp * tp == 1 && job_.size == 1) return;
  TROUPE_CHECK(job_.size == dp * tp, invalid_argument, tp > 1 ? "--dp " + std::to_string(dp) + " x --tp " + std::to_string(tp) : "--dp " + std::to_string(dp),
               " but this process is rank ", job_.rank, " of a ", job_.size, "-rank job (", job_.source,
               "); start it with troupe-launch -n ", dp * tp, " -- ...");
  join();
  make_groups(zero);
}

ParallelJob::ParallelJob(const MeshChooser& choose, bool zero) {
  job_ = transport::JobInfo::from_environment();
  join();
  std::vector<int> everyone;
  for (int r = 0; r < job_.size; ++r) everyone.push_back(r);
  world_ = communicator(everyone, "world", 5);
  std::tie(dp_, tp_) = choose(*world_, [this](const std::vector<int>& members, const char* name) {
    return probes_.emplace_back(communicator(members, name, 6));
  });
  TROUPE_CHECK(dp_ >= 1 && tp_ >= 1 && dp_ * tp_ == job_.size, invalid_argument, "the mesh chosen for a ", job_.size,
               "-rank job is dp=", dp_, " x tp=", tp_, "; it must use every rank");
  make_groups(zero);
}

int ParallelJob::world_size() { return transport::JobInfo::from_environment().size; }

void ParallelJob::join() { bootstrap_ = std::make_unique<transport::Bootstrap>(job_, job_.timeout); }

std::shared_ptr<transport::Communicator> ParallelJob::communicator(const std::vector<int>& members, const char* name,
                                                                  std::uint32_t channel) {
  std::unique_ptr<transport::Transport> world = transport::make_ucx_transport(*bootstrap_, job_.timeout);
  if (static_cast<int>(members.size()) < job_.size) world = transport::make_subgroup(std::move(world), members);
  return std::make_shared<transport::Communicator>(std::move(world), name, channel);
}

void ParallelJob::make_groups(bool zero) {
  // Every rank makes the same transports in the same order (each is a collective of the job).
  std::vector<int> dp_members, tp_members;
  for (int i = 0; i < dp_; ++i) dp_members.push_back(i * tp_ + tp_rank());
  for (int j = 0; j < tp_; ++j) tp_members.push_back(dp_rank() * tp_ + j);
  if (dp_ > 1) {
    allreduce_ = communicator(dp_members, "allreduce", 0);
    allgather_ = communicator(dp_members, "allgather", 1);
    if (zero) zero_ = communicator(dp_members, "zero", 4);
  }
  if (tp_ > 1) {
    tp_group_ = communicator(tp_members, "tp", 2);
    tp_norms_ = communicator(tp_members, "tp-norms", 3);
  }
}

actors::DataParallel ParallelJob::options(double fusion_mb) {
  actors::DataParallel dp;
  dp.communicator = allreduce_;
  dp.fusion_mb = fusion_mb;
  if (fusion_mb == 0 && allreduce_) {
    link_ = plan::measure_link(*allreduce_);
    const plan::BucketSizes sizes = plan::choose_buckets(link_);
    dp.fusion_mb = sizes.fusion_mb;
    dp.first_bucket_mb = sizes.first_mb;
  } else if (fusion_mb == 0) {
    dp.fusion_mb = 64;  // (no data parallelism: unused)
  }
  dp.zero = zero_ != nullptr;
  dp.zero_group = zero_;
  return dp;
}

std::vector<std::string> ParallelJob::compare_bucket_norms(std::int64_t step, const std::vector<double>& squared_norms) {
  std::vector<std::string> warnings;
  if (!allgather_) return warnings;
  Tensor mine = Tensor::from_vector(squared_norms, {static_cast<std::int64_t>(squared_norms.size())});
  Tensor all;
  allgather_->submit([&](transport::ProcessGroup& g) { all = g.all_gather(mine); }).get();
  const auto v = all.to_vector<double>();
  const std::size_t buckets = squared_norms.size();
  for (std::size_t b = 0; b < buckets; ++b)
    for (int r = 1; r < dp_; ++r) {
      const double a = std::sqrt(v[b]), x = std::sqrt(v[static_cast<std::size_t>(r) * buckets + b]);
      const double diff = std::abs(a - x) / std::max(std::abs(a), 1e-30);
      if (diff > 1e-5) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "warning: step %lld bucket %zu: replica 0 gradient norm %.9g, replica %d %.9g (relative difference %.3g)",
                      static_cast<long long>(step), b, a, r, x, diff);
        warnings.emplace_back(buf);
      }
    }
  return warnings;
}

}  // namespace troupe::apps
