// The Troupe side of `bench/run allreduce`: run under troupe-launch -n N; AllReduce (sum) of f32
// buffers over UCX, median of REPS after a warm-up, and a memcpy of the same size. Rank 0 prints
// {"impl":"troupe","bytes":...,"ms":...,"memcpy_gbps":...} per size.
// usage: troupe-bench-allreduce [REPS] MiB...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/process_group.hpp"
#include "troupe/transport/ucx.hpp"

using namespace troupe;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  std::vector<double> sizes_mib;
  for (int i = 2; i < argc; ++i) sizes_mib.push_back(std::atof(argv[i]));
  if (sizes_mib.empty()) sizes_mib = {1, 4, 16, 64, 256};
  const transport::JobInfo job = transport::JobInfo::from_environment();
  transport::Bootstrap boot(job, job.timeout);
  auto t = transport::make_ucx_transport(boot, job.timeout);
  transport::ProcessGroup g(*t, 0, 4 << 20);
  for (double mib : sizes_mib) {
    const auto n = static_cast<std::int64_t>(mib * 1024 * 1024 / 4);
    Tensor x = Tensor::full({n}, 1.0);
    g.all_reduce(x);  // warm-up: registration, first touch
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      g.barrier();
      const auto t0 = Clock::now();
      g.all_reduce(x);
      ms.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e3);
    }
    std::sort(ms.begin(), ms.end());
    std::vector<char> a(static_cast<std::size_t>(n) * 4, 1), b(a.size());
    std::memcpy(b.data(), a.data(), a.size());
    const auto c0 = Clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    const double copy_s = std::chrono::duration<double>(Clock::now() - c0).count();
    if (job.rank == 0)
      std::printf("{\"impl\":\"troupe\",\"bytes\":%lld,\"ms\":%.3f,\"memcpy_gbps\":%.2f}\n", static_cast<long long>(n * 4),
                  ms[ms.size() / 2], static_cast<double>(a.size()) / copy_s / 1e9);
    std::fflush(stdout);
  }
  return 0;
}
