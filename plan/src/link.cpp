// Measuring a group's link and choosing data-parallel bucket sizes from it (troupe/plan/placement.hpp).
#include <algorithm>
#include <chrono>
#include <vector>

#include "troupe/plan/link.hpp"
#include "troupe/plan/placement.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::plan {

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

std::map<std::string, std::map<std::string, CostModel::Link>> measure_mesh_links(transport::Communicator& world,
                                                                                 const std::vector<int>& tps,
                                                                                 const GroupMaker& group) {
  const int n = world.size(), r = world.rank();
  std::map<std::string, std::map<std::string, CostModel::Link>> out;
  for (const int tp : tps) {
    TROUPE_CHECK(tp >= 1 && n % tp == 0, invalid_argument, "measure_mesh_links: tp=", tp, " does not divide ", n, " ranks");
    const int dp = n / tp;
    // This rank's group along each axis, and its link (the whole job's group is `world` itself).
    std::vector<int> tp_members, dp_members;
    for (int j = 0; j < tp; ++j) tp_members.push_back(r / tp * tp + j);
    for (int i = 0; i < dp; ++i) dp_members.push_back(i * tp + r % tp);
    std::vector<double> mine;
    const auto measure = [&](const std::vector<int>& members, const char* name) {
      if (members.size() < 2) return;
      const CostModel::Link l = static_cast<int>(members.size()) == n ? measure_link(world) : measure_link(*group(members, name));
      mine.insert(mine.end(), {l.gbytes_per_s, l.latency_us});
    };
    measure(tp_members, "tp-link");
    measure(dp_members, "dp-link");
    const std::vector<double> agreed = agree_on_means(world, mine);  // the groups' mean
    std::map<std::string, CostModel::Link>& links = out[job_mesh(dp, tp, n).str()];
    std::size_t k = 0;
    if (tp > 1) {
      links["tp"] = {agreed[k], agreed[k + 1]};
      k += 2;
    }
    if (dp > 1) links["dp"] = {agreed[k], agreed[k + 1]};
  }
  return out;
}

BucketSizes choose_buckets(const CostModel::Link& link) {
  const double mib = 99 * link.latency_us * 1e-6 * link.gbytes_per_s * 1e9 / (1 << 20);
  BucketSizes b;
  b.fusion_mb = std::clamp(mib, 0.25, 64.0);
  b.first_mb = std::min(1.0, b.fusion_mb);
  return b;
}

}  // namespace troupe::plan
