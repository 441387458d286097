// Splitting a model's layers among pipeline stages (troupe/plan/stages.hpp).
#include "troupe/plan/stages.hpp"

#include <numeric>

#include "troupe/kernels/error.hpp"

namespace troupe::plan {

std::vector<int> stage_layers(int layers, int stages, const std::vector<int>& given) {
  TROUPE_CHECK(stages >= 1, invalid_argument, "--pp must be >= 1, got ", stages);
  if (given.empty()) {
    std::vector<int> split(static_cast<std::size_t>(stages), layers / stages);
    for (int s = 0; s < layers % stages; ++s) ++split[static_cast<std::size_t>(s)];
    return split;
  }
  auto listed = [&] {
    std::string s;
    for (int n : given) s += (s.empty() ? "" : ",") + std::to_string(n);
    return s;
  };
  TROUPE_CHECK(static_cast<int>(given.size()) == stages, invalid_argument, "--pp-layers ", listed(), " gives ",
               given.size(), " stages and --pp is ", stages, "; give one layer count per stage");
  for (int n : given)
    TROUPE_CHECK(n >= 0, invalid_argument, "--pp-layers ", listed(), ": a stage cannot have ", n, " layers");
  const int total = std::accumulate(given.begin(), given.end(), 0);
  TROUPE_CHECK(total == layers, invalid_argument, "--pp-layers ", listed(), " adds up to ", total,
               " layers and the model has ", layers, "; give counts that add up to ", layers);
  return given;
}

}  // namespace troupe::plan
