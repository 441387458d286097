// Runtime benchmarks: one JSON line per measurement on stdout.
//  - message: cost per message of the register protocol (ready + release between op actors) in a
//    chain of empty ops, with the tracer off and on;
//  - empty-op-chain and fan-out: ops per second of graphs whose ops do no work;
//  - gpt-block-step: a GPT block training step (d_model 256, seq 128, batch 8, 8 heads) as an actor
//    graph; kernel_ms is the sum of the step's kernel runs (from a traced step), so
//    overhead = (step_ms - kernel_ms) / step_ms is what the runtime adds. Measured on one scheduler
//    thread with one BLAS thread and a pool of one core (no overlap can hide overhead), then on all
//    cores for reference;
//  - gpt-block-streams: that step with kernels run in the actors against stream-ordered on 1 and 2
//    host streams (ProgramOptions::streams), alternating.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <cblas.h>

#include "troupe/actors/engine.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/rng.hpp"
#include "troupe/kernels/threading.hpp"

using namespace troupe;
using namespace troupe::graph;
using namespace troupe::actors;

namespace {
using Clock = std::chrono::steady_clock;

// Median wall seconds of `rounds` steps of `program` on `inputs` (after one warm-up step).
double median_step_seconds(Program& program, const std::vector<Tensor>& inputs, int rounds) {
  program.run(inputs);
  std::vector<double> t;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    program.run(inputs);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Sum of kernel ("compute") time of one traced step, in seconds.
double traced_kernel_seconds(Program& program, const std::vector<Tensor>& inputs) {
  Tracer& tracer = Tracer::instance();
  tracer.clear();
  tracer.enable(true);
  program.run(inputs);
  tracer.enable(false);
  double ns = 0;
  for (const TraceEvent& e : tracer.events())
    if (e.type == TraceEvent::Type::handle && std::string(e.kind) == "compute") ns += static_cast<double>(e.dur_ns);
  if (const char* path = std::getenv("TROUPE_BENCH_TRACE")) tracer.write_chrome_json(path);  // for troupe-trace
  tracer.clear();
  return ns * 1e-9;
}

void bench_chain(Engine& engine, int threads) {
  const int length = 32, micro_batches = 512;
  auto chain = [&](const std::vector<Var>& in) {
    Var h = in[0];
    for (int i = 0; i < length; ++i) h = apply1("identity", {h});
    return std::vector<Var>{h};
  };
  ProgramOptions options;
  options.micro_batches = micro_batches;
  auto program = engine.compile(trace(chain, {{"x", {-1}}}), options);
  const std::vector<Tensor> inputs{Tensor::zeros({micro_batches})};
  // Messages per step: each micro-batch crosses length + 1 edges (input, ops, sink), one ready and
  // one release each; plus one done per op and per input, one result, start and run.
  const double messages = 2.0 * micro_batches * (length + 1) + length + 4;
  for (bool traced : {false, true}) {
    Tracer::instance().enable(traced);
    const double s = median_step_seconds(*program, inputs, 5);
    Tracer::instance().enable(false);
    Tracer::instance().clear();
    std::printf("{\"bench\":\"message\",\"tracer\":\"%s\",\"ns_per_message\":%.0f,\"messages\":%.0f,\"threads\":%d}\n",
                traced ? "on" : "off", s * 1e9 / messages, messages, threads);
    if (!traced)
      std::printf("{\"bench\":\"empty-op-chain\",\"ops\":%d,\"micro_batches\":%d,\"ops_per_s\":%.0f,\"threads\":%d}\n",
                  length, micro_batches, length * micro_batches / s, threads);
  }
}

void bench_fan_out(Engine& engine, int threads) {
  const int width = 64, micro_batches = 64;
  auto fan = [&](const std::vector<Var>& in) {
    Var acc = apply1("identity", {in[0]});
    for (int i = 1; i < width; ++i) acc = acc + apply1("identity", {in[0]});
    return std::vector<Var>{acc};
  };
  ProgramOptions options;
  options.micro_batches = micro_batches;
  auto program = engine.compile(trace(fan, {{"x", {-1}}}), options);
  const double s = median_step_seconds(*program, {Tensor::zeros({micro_batches})}, 5);
  const int ops = 2 * width - 1;
  std::printf("{\"bench\":\"fan-out\",\"width\":%d,\"ops\":%d,\"micro_batches\":%d,\"ops_per_s\":%.0f,\"threads\":%d}\n",
              width, ops, micro_batches, ops * micro_batches / s, threads);
}

// A GPT block's training step (d_model 256, seq 128, batch 8, 8 heads, MSE loss) and its inputs.
struct GptBlockStep {
  static constexpr std::int64_t d = 256, seq = 128, batch = 8, heads = 8;
  Generator gen{0};
  GPTBlock block{d, heads, gen};
  std::vector<Tensor> inputs{Tensor::empty({batch, seq, d}), Tensor::empty({batch, seq, d})};
  TracedFunction traced = trace_step();
  GptBlockStep() {
    for (Tensor& t : inputs) gen.normal_(t);
  }
  TracedFunction trace_step() {
    auto loss = [this](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(block(in[0]), in[1])}; };
    const SymDim b = SymDim::symbol("batch");
    return trace(loss, {{"x", {b, seq, d}}, {"target", {b, seq, d}}}).with_gradients();
  }
};

void bench_gpt_block(Engine& engine, int threads, int micro_batches) {
  GptBlockStep gpt;
  const std::int64_t d = gpt.d, seq = gpt.seq, batch = gpt.batch, heads = gpt.heads;
  ProgramOptions options;
  options.micro_batches = micro_batches;
  const TracedFunction& traced = gpt.traced;
  auto program = engine.compile(traced, options);
  const std::vector<Tensor>& inputs = gpt.inputs;
  // Rounds of: an actor step, a traced actor step (its kernel time), the same graph on the
  // sequential executor (no actors). Interleaving makes machine noise hit all three alike.
  std::vector<double> actor_s, kernel_s, executor_s;
  program->run(inputs);
  traced(inputs);
  for (int i = 0; i < 7; ++i) {
    auto t0 = Clock::now();
    program->run(inputs);
    actor_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    kernel_s.push_back(traced_kernel_seconds(*program, inputs));
    t0 = Clock::now();
    traced(inputs);
    executor_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    for (const Var& p : traced.parameters()) p.zero_grad();
  }
  for (auto* v : {&actor_s, &kernel_s, &executor_s}) std::sort(v->begin(), v->end());
  const double step = actor_s[3], kernels = kernel_s[3], executor = executor_s[3];
  std::printf("{\"bench\":\"gpt-block-step\",\"d_model\":%lld,\"seq\":%lld,\"batch\":%lld,\"heads\":%lld,"
              "\"micro_batches\":%d,\"threads\":%d,\"blas_threads\":%d,\"actors\":%d,"
              "\"step_ms\":%.2f,\"kernel_ms\":%.2f,\"overhead\":%.4f,\"executor_ms\":%.2f}\n",
              static_cast<long long>(d), static_cast<long long>(seq), static_cast<long long>(batch),
              static_cast<long long>(heads), micro_batches, threads, kernel_threads(), program->actor_counts().at("op"),
              step * 1e3, kernels * 1e3, (step - kernels) / step, executor * 1e3);
}
// The same step kernel by kernel in the actors and stream-ordered on 1 and 2 host streams
// (ProgramOptions::streams), alternating rounds in one process: what the streams' hand-overs cost
// on the CPU, where they buy nothing (their path is a GPU's).
void bench_gpt_block_streams(Engine& engine, int threads) {
  GptBlockStep gpt;
  const std::vector<int> counts{0, 1, 2};
  std::vector<std::unique_ptr<Program>> programs;
  for (int streams : counts) {
    ProgramOptions options;
    options.streams = streams;
    programs.push_back(engine.compile(gpt.traced, options));
  }
  const std::vector<Tensor>& inputs = gpt.inputs;
  std::vector<std::vector<double>> seconds(counts.size());
  for (auto& p : programs) p->run(inputs);
  for (int round = 0; round < 9; ++round)
    for (std::size_t k = 0; k < programs.size(); ++k) {
      const auto t0 = Clock::now();
      programs[k]->run(inputs);
      seconds[k].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  for (auto& v : seconds) std::sort(v.begin(), v.end());
  for (std::size_t k = 0; k < counts.size(); ++k)
    std::printf("{\"bench\":\"gpt-block-streams\",\"isa\":\"%s\",\"openblas_core\":\"%s\",\"threads\":%d,"
                "\"streams\":%d,\"step_ms\":%.2f,\"vs_inline\":%.3f}\n",
                kernels::cpu_isa(), openblas_get_corename(), threads, counts[k], seconds[k][4] * 1e3,
                seconds[k][4] / seconds[0][4]);
}
}  // namespace

int main() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  set_kernel_threads(1);
  {
    // One core: the kernels' pool may not add a helper (its time would hide the runtime's).
    set_parallel_cores(1);
    Engine one(EngineOptions{1, 64});
    bench_chain(one, 1);
    bench_fan_out(one, 1);
    bench_gpt_block(one, 1, 1);
  }
  {
    set_parallel_cores(cores);
    Engine all(EngineOptions{static_cast<std::size_t>(cores), 64});
    bench_chain(all, cores);
    bench_fan_out(all, cores);
    bench_gpt_block(all, cores, 1);
    bench_gpt_block(all, cores, 2);
    bench_gpt_block_streams(all, cores);
  }
  return 0;
}
