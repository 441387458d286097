// The Troupe side of `bench/run vs-torch`: one workload, one thread setting, timed over a few
// steps after warm-up; prints {"workload":...,"ms":median,...} for bench/vs_torch.py to pair with
// the PyTorch side. The workloads are the apps' models at their default sizes:
//   gpt-train-step   gpt-mini, batch 8 x 128: forward + backward + clip 1.0 + AdamW (actor program)
//   gpt-forward      gpt-mini logits of batch 8 x 128 (actor program, no gradients)
//   sr-train-step    sr-lite, batch 4 of 64x64 -> 128x128: forward + backward + Adam (relu or custom-relu)
//   sr-infer         sr-lite on one 1x3x128x128 image
// The graphs go through the passes of JIT_LEVEL (default 3), as the apps' do.
// usage: troupe-bench-vs-torch WORKLOAD SCHEDULER_THREADS KERNEL_THREADS MICRO_BATCHES [relu|custom-relu] [STEPS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "troupe/actors/engine.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/threading.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/models/sr_lite.hpp"

using namespace troupe;
using graph::Var;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: troupe-bench-vs-torch WORKLOAD SCHEDULER_THREADS KERNEL_THREADS MICRO_BATCHES [ACT] [STEPS]\n");
    return 2;
  }
  const std::string workload = argv[1];
  const int sched = std::atoi(argv[2]), kernel = std::atoi(argv[3]), mb = std::atoi(argv[4]);
  const std::string act = argc > 5 ? argv[5] : "relu";
  const int steps = argc > 6 ? std::atoi(argv[6]) : 6;
  set_kernel_threads(kernel);
  Generator gen(1);
  actors::Engine engine({static_cast<std::size_t>(sched)});
  const graph::SymDim b = graph::SymDim::symbol("batch");
  std::unique_ptr<actors::Program> program;
  std::vector<Tensor> inputs;
  std::unique_ptr<models::Gpt> gpt;
  std::unique_ptr<models::SrLite> sr;
  actors::ProgramOptions po;
  po.micro_batches = mb;
  // The graph passes of JIT_LEVEL (default 3), as the apps run them: before and after the gradients.
  const int level = graph::jit_level();
  const auto training = [level](const graph::TracedFunction& f) { return f.optimized(level).with_gradients().optimized(level); };
  if (workload.rfind("gpt", 0) == 0) {
    gpt = std::make_unique<models::Gpt>(models::GptConfig{}, gen);
    Tensor ids = Tensor::empty({8, 128}, DType::i64), targets = Tensor::empty({8, 128}, DType::i64);
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      ids.data<std::int64_t>()[i] = (i * 7919) % 256;
      targets.data<std::int64_t>()[i] = (i * 104729) % 256;
    }
    const std::vector<graph::InputSpec> sig = {{"ids", {b, 128}, DType::i64}, {"targets", {b, 128}, DType::i64}};
    if (workload == "gpt-train-step") {
      auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{gpt->loss(in[0], in[1])}; };
      kernels::AdamWParams hp;
      hp.lr = 3e-4;
      hp.weight_decay = 0.01;
      po.optimizers = {std::make_shared<graph::AdamW>(gpt->parameters(), hp)};
      po.clip_grad_norm = 1.0;
      program = engine.compile(training(graph::trace(fn, sig)), po);
      inputs = {ids, targets};
    } else {
      auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{gpt->logits(in[0])}; };
      program = engine.compile(graph::trace(fn, {sig[0]}).for_inference().optimized(level), po);
      inputs = {ids};
    }
  } else {
    models::SrConfig cfg;
    cfg.activation = models::parse_activation(act);
    sr = std::make_unique<models::SrLite>(cfg, gen);
    if (workload == "sr-train-step") {
      auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{graph::mse_loss((*sr)(in[0]), in[1])}; };
      kernels::AdamWParams hp;
      hp.lr = 1e-3;
      hp.weight_decay = 0;
      po.optimizers = {std::make_shared<graph::AdamW>(sr->parameters(), hp)};
      program = engine.compile(training(graph::trace(fn, {{"x", {b, 3, 64, 64}}, {"y", {b, 3, 128, 128}}})), po);
      Tensor x = Tensor::empty({4, 3, 64, 64}), y = Tensor::empty({4, 3, 128, 128});
      gen.uniform_(x);
      gen.uniform_(y);
      inputs = {x, y};
    } else {
      auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{(*sr)(in[0])}; };
      program = engine.compile(graph::trace(fn, {{"x", {b, 3, 128, 128}}}).for_inference().optimized(level), po);
      Tensor x = Tensor::empty({1, 3, 128, 128});
      gen.uniform_(x);
      inputs = {x};
    }
  }
  std::vector<double> ms;
  for (int i = 0; i < steps + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    program->run(inputs);
    if (i >= 2) ms.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("{\"workload\":\"%s\",\"ms\":%.3f,\"scheduler_threads\":%d,\"kernel_threads\":%d,\"micro_batches\":%d,\"act\":\"%s\","
              "\"jit_level\":%d}\n",
              workload.c_str(), ms[ms.size() / 2], sched, kernel, mb, act.c_str(), level);
  return 0;
}
