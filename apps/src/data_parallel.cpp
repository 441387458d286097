#include "troupe/apps/data_parallel.hpp"

#include <cmath>
#include <cstdio>

#include "troupe/kernels/error.hpp"
#include "troupe/transport/ucx.hpp"

namespace troupe::apps {

DataParallelJob::DataParallelJob(int ranks) {
  TROUPE_CHECK(ranks >= 1, invalid_argument, "--dp must be >= 1, got ", ranks);
  job_ = transport::JobInfo::from_environment();
  if (ranks == 1 && job_.size == 1) return;
  TROUPE_CHECK(job_.size == ranks, invalid_argument, "--dp ", ranks, " but this process is rank ", job_.rank, " of a ",
               job_.size, "-rank job (", job_.source, "); start it with troupe-launch -n ", ranks, " -- ...");
  bootstrap_ = std::make_unique<transport::Bootstrap>(job_, job_.timeout);
  allreduce_ = std::make_shared<transport::Communicator>(transport::make_ucx_transport(*bootstrap_, job_.timeout), "allreduce", 0);
  allgather_ = std::make_shared<transport::Communicator>(transport::make_ucx_transport(*bootstrap_, job_.timeout), "allgather", 1);
}

actors::DataParallel DataParallelJob::options(double fusion_mb) const {
  actors::DataParallel dp;
  dp.communicator = allreduce_;
  dp.fusion_mb = fusion_mb;
  return dp;
}

std::vector<std::string> DataParallelJob::compare_bucket_norms(std::int64_t step, const std::vector<double>& squared_norms) {
  std::vector<std::string> warnings;
  if (!allgather_) return warnings;
  Tensor mine = Tensor::from_vector(squared_norms, {static_cast<std::int64_t>(squared_norms.size())});
  Tensor all;
  allgather_->submit([&](transport::ProcessGroup& g) { all = g.all_gather(mine); }).get();
  const auto v = all.to_vector<double>();
  const std::size_t buckets = squared_norms.size();
  for (std::size_t b = 0; b < buckets; ++b)
    for (int r = 1; r < size(); ++r) {
      const double a = std::sqrt(v[b]), x = std::sqrt(v[static_cast<std::size_t>(r) * buckets + b]);
      const double diff = std::abs(a - x) / std::max(std::abs(a), 1e-30);
      if (diff > 1e-5) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "warning: step %lld bucket %zu: rank 0 gradient norm %.9g, rank %d %.9g (relative difference %.3g)",
                      static_cast<long long>(step), b, a, r, x, diff);
        warnings.emplace_back(buf);
      }
    }
  return warnings;
}

}  // namespace troupe::apps
