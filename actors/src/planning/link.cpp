// Measuring a group's link and choosing data-parallel bucket sizes from it (troupe/actors/planning.hpp).
#include <algorithm>
#include <chrono>
#include <vector>

#include "troupe/actors/planning.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

CostModel::Link measure_link(transport::Communicator& comm) {
  const Tensor small = Tensor::zeros({2}), large = Tensor::zeros({1 << 20});  // 8 bytes, 4 MiB
  std::vector<double> latencies;
  double best_large = 1e300;
  std::vector<double> mine;
  comm.submit([&](transport::ProcessGroup& g) {
        const auto seconds = [&](const Tensor& t) {
          const auto t0 = std::chrono::steady_clock::now();
          g.all_reduce(t);
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        };
        for (int i = 0; i < 3; ++i) seconds(small);  // warm-up: connections, buffers
        for (int i = 0; i < 20; ++i) latencies.push_back(seconds(small));
        for (int i = 0; i < 3; ++i) best_large = std::min(best_large, seconds(large));
        std::nth_element(latencies.begin(), latencies.begin() + 10, latencies.end());
        const double latency = latencies[10], n = g.size();
        const double sent = 2 * (n - 1) / n * static_cast<double>(large.nbytes());
        mine = {sent / std::max(best_large - latency, 1e-9) / 1e9, latency * 1e6};
      })
      .get();
  const std::vector<double> v = agree_on_means(comm, mine);  // every rank plans the same buckets
  return {v[0], v[1]};
}

std::vector<double> agree_on_means(transport::Communicator& comm, const std::vector<double>& figures) {
  const Tensor all = Tensor::from_vector(figures, {static_cast<std::int64_t>(figures.size())});
  comm.submit([&](transport::ProcessGroup& g) { g.all_reduce(all, transport::ReduceOp::mean); }).get();
  return all.to_vector<double>();
}

BucketSizes choose_buckets(const CostModel::Link& link) {
  const double mib = 99 * link.latency_us * 1e-6 * link.gbytes_per_s * 1e9 / (1 << 20);
  BucketSizes b;
  b.fusion_mb = std::clamp(mib, 0.25, 64.0);
  b.first_mb = std::min(1.0, b.fusion_mb);
  return b;
}

}  // namespace troupe::actors
