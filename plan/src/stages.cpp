// Splitting a model's layers among pipeline stages (troupe/plan/stages.hpp).
#include "troupe/plan/stages.hpp"

#include <numeric>

#include "troupe/graph/pipeline_stage.hpp"
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

std::vector<graph::TracedFunction> trace_stage_steps(const StagePolicy& policy, const std::vector<int>& layers,
                                                     const std::vector<graph::InputSpec>& signature) {
  std::vector<graph::TracedFunction> steps;
  graph::InputSpec activation;
  int begin = 0;
  const int count = static_cast<int>(layers.size());
  for (int s = 0; s < count; ++s) {
    const StageSpan span{begin, begin + layers[static_cast<std::size_t>(s)], s == 0, s + 1 == count};
    begin = span.end;
    graph::StageChannels channels;
    if (!span.first) channels.activation_in = 1, channels.gradient_out = 2;
    if (!span.last) channels.activation_out = 3, channels.gradient_in = 4;
    std::vector<graph::InputSpec> sig = signature;
    if (!span.first) sig.insert(sig.begin(), activation);
    const graph::TracedFunction forward = graph::trace(
        graph::stage_forward([&](const std::vector<graph::Var>& in) { return policy.forward(span, in); }, channels), sig);
    const graph::ValueInfo& out = forward.graph().value(forward.graph().outputs()[0]).info;
    activation = {"activation", out.shape, out.dtype};
    steps.push_back(forward.with_stage_gradients(channels));
  }
  return steps;
}

}  // namespace troupe::plan
