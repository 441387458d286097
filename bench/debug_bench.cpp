// bench/run debug: what DEBUG's prints cost when DEBUG is off. gpt-mini's training step (batch 8 x
// 128, forward and backward, f32, one kernel thread) eagerly, through models::Gpt::loss with its
// per-block debug_print calls, against the same forward composed from the model's layers without
// them: the build without the calls, in the same binary. Rounds alternate the two so drift hits
// both alike (in ABBA order); the line gives each one's median and their ratio. Traced, the two steps' graphs are
// compared node for node (forward and backward): with DEBUG off the calls add no node.
// Prints {"bench":"debug-off","isa":...,"openblas_core":...,"with_calls_ms":...,"without_calls_ms":...,
// "ratio":...,"rounds":R,"traced_nodes_with_calls":N,"traced_nodes_without_calls":M}.
// usage: troupe-bench-debug [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include <cblas.h>

#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/debug.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/threading.hpp"
#include "troupe/models/gpt.hpp"

using namespace troupe;
using graph::Var;

namespace {

// Gpt::loss without the debug_print calls: the same layers in the same order.
Var loss_without_calls(models::Gpt& m, const Var& ids, const Var& targets) {
  std::vector<std::int64_t> positions(static_cast<std::size_t>(m.config.seq));
  std::iota(positions.begin(), positions.end(), 0);
  Var h = (*m.wte)(ids) + (*m.wpe)(Tensor::from_vector(positions, {m.config.seq}));
  for (const auto& block : m.block_list) h = (*block)(h);
  return graph::cross_entropy((*m.lm_head)((*m.ln_f)(h)), targets);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 30;
  graph::set_debug_enabled(false);
  set_kernel_threads(1);
  Generator gen(1);
  models::Gpt model(models::GptConfig{}, gen);
  Tensor ids = Tensor::empty({8, 128}, DType::i64), targets = Tensor::empty({8, 128}, DType::i64);
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    ids.data<std::int64_t>()[i] = (i * 7919) % 256;
    targets.data<std::int64_t>()[i] = (i * 104729 + 13) % 256;
  }
  const auto with_calls = [&] { return model.loss(Var(ids), Var(targets)); };
  const auto without_calls = [&] { return loss_without_calls(model, Var(ids), Var(targets)); };
  const auto step_ms = [&](const auto& loss) {
    const auto t0 = std::chrono::steady_clock::now();
    graph::backward(loss());
    model.zero_grad();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  step_ms(with_calls);  // warm-up: the allocator's caches and oneDNN's primitives
  step_ms(without_calls);
  std::vector<double> a, b;
  for (int r = 0; r < rounds; ++r) {  // ABBA: neither runs always first
    if (r % 2 == 0) a.push_back(step_ms(with_calls));
    b.push_back(step_ms(without_calls));
    if (r % 2 == 1) a.push_back(step_ms(with_calls));
  }
  const graph::SymDim rows = graph::SymDim::symbol("batch");
  const std::vector<graph::InputSpec> signature{{"ids", {rows, 128}, DType::i64}, {"targets", {rows, 128}, DType::i64}};
  const auto nodes = [&](const auto& loss) {
    const graph::TracedFunction f =
        graph::trace([&](const std::vector<Var>& in) { return std::vector<Var>{loss(in[0], in[1])}; }, signature).with_gradients();
    return f.graph().nodes().size();
  };
  const std::size_t traced_with = nodes([&](const Var& i, const Var& t) { return model.loss(i, t); });
  const std::size_t traced_without = nodes([&](const Var& i, const Var& t) { return loss_without_calls(model, i, t); });
  const double ma = median(a), mb = median(b);
  std::printf("{\"bench\":\"debug-off\",\"isa\":\"%s\",\"openblas_core\":\"%s\",\"model\":\"gpt-mini\",\"batch\":8,\"seq\":128,"
              "\"with_calls_ms\":%.3f,\"without_calls_ms\":%.3f,\"ratio\":%.4f,\"rounds\":%d,\"traced_nodes_with_calls\":%zu,"
              "\"traced_nodes_without_calls\":%zu}\n",
              kernels::cpu_isa(), openblas_get_corename(), ma, mb, ma / mb, rounds, traced_with, traced_without);
  return 0;
}
