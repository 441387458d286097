// The Troupe side of `bench/run jit`: one workload at one JIT level, timed over a few calls after
// warm-up, the way the apps run it; prints {"workload":...,"level":L,"ms":median,"peak_bytes":...,
// "allocs_per_step":...} for bench/jit.py to pair with the other levels and with PyTorch.
//   sr-infer SIZE   sr-lite (app defaults) on one 1x3xSIZExSIZE image: troupe-sr infer's graph::Jit
//   gpt-forward     gpt-mini logits of batch 8 x 128: troupe-gpt generate's graph::Jit
//   gpt-train-floor the products of gpt-train's step (its level-3 graph at AMP), each alone, one after another
//   gpt-train       gpt-mini, batch 8 x 128, AdamW, clip 1.0: the library's ParallelTraining (actor program,
//                   1 scheduler thread, 1 micro-batch; eager at level 0)
//   sr-train        sr-lite, batch 4 of 64x64 -> 128x128, Adam 1e-3: ParallelTraining, as gpt-train
//   gpt-decode      SIZE tokens sampled greedily after a 16-token prompt by troupe-gpt generate's
//                   GptDecoder, with the key/value cache (one position per token); SIZE <= 112 stays
//                   inside gpt-mini's 128-token context
//   gpt-decode-recompute  the same, recomputing the whole context for every token (--recompute)
//   gpt-decode-bf16  gpt-decode with the model converted to bf16 once (Module::to)
//   gpt-decode-batch SIZE rows decoded together as troupe-serve batches them: 16-token prompts
//                   started together, then 32 greedy steps of every row
//   gpt-decode-batch-actors  the same, each step run by an actor program as troupe-serve runs
//                   them: KERNEL_THREADS scheduler threads (troupe-serve's --actor-threads), one micro-batch
//   gpt-decode-paths  the two above side by side in one process, alternating STEPS rounds, the actor
//                   program with its ops grouped (the default) and ungrouped: one line per path
//                   with its ratio to the direct calls
// peak_bytes: the allocator's peak during a steady-state call above what was held before it, plus
// the planned arena a level-3 function keeps between calls; planned_bytes: that arena;
// allocs_per_step: allocator requests in that call. AMP (O0, O1, O2 or O3, bf16) is the mixed precision
// of every workload (bench/amp.py).
// usage: troupe-bench-jit WORKLOAD LEVEL KERNEL_THREADS [SIZE] [STEPS] [AMP]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <cblas.h>

#include "troupe/actors/engine.hpp"
#include "troupe/actors/parallel_training.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/registry.hpp"
#include "troupe/kernels/threading.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/models/gpt_decoder.hpp"
#include "troupe/models/sr_lite.hpp"

using namespace troupe;
using graph::Var;

namespace {

// `rows` 16-token prompts started together, then 32 greedy steps of every row (the last call's rows leave first).
void decode_batch(models::GptDecoder& decoder, std::int64_t rows) {
  std::vector<std::vector<std::int64_t>> prompts(static_cast<std::size_t>(rows), std::vector<std::int64_t>(16));
  for (std::size_t r = 0; r < prompts.size(); ++r)
    for (std::size_t i = 0; i < 16; ++i) prompts[r][i] = static_cast<std::int64_t>('a' + (r + i) % 26);
  decoder.keep_rows(std::vector<bool>(decoder.positions().size(), false));
  std::vector<std::vector<float>> logits = decoder.add(prompts);
  for (int k = 0; k < 32; ++k) {
    std::vector<std::int64_t> tokens;
    for (const std::vector<float>& row : logits) tokens.push_back(std::max_element(row.begin(), row.end()) - row.begin());
    logits = decoder.step(tokens);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: troupe-bench-jit sr-infer|sr-train|gpt-forward|gpt-train|gpt-train-floor|gpt-decode|gpt-decode-recompute|gpt-decode-bf16|gpt-decode-batch|gpt-decode-batch-actors|gpt-decode-paths "
                 "LEVEL KERNEL_THREADS [SIZE] [STEPS] [AMP]\n");
    return 2;
  }
  const std::string workload = argv[1];
  const int level = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  const std::int64_t size = argc > 4 ? std::atoll(argv[4]) : 128;
  const int steps = argc > 5 ? std::atoi(argv[5]) : 6;
  const graph::AmpOptions amp{graph::parse_amp_level(argc > 6 ? argv[6] : "O0"), DType::bf16};
  set_kernel_threads(threads);
  Generator gen(1);
  const graph::SymDim b = graph::SymDim::symbol("batch");
  // Inference runs without recording gradients, as troupe-sr infer and troupe-gpt generate do
  // (eager mode would otherwise keep the autograd tape of every call).
  std::unique_ptr<graph::NoGradGuard> no_grad;
  if (workload != "gpt-train" && workload != "gpt-train-floor" && workload != "sr-train") no_grad = std::make_unique<graph::NoGradGuard>();
  std::function<void()> call;
  std::unique_ptr<models::SrLite> sr;
  std::unique_ptr<models::Gpt> gpt;
  std::unique_ptr<graph::Jit> jit;
  std::unique_ptr<actors::ParallelTraining> train;
  std::unique_ptr<actors::Engine> engine;  // before the decoder: its step program runs on it
  std::unique_ptr<models::GptDecoder> decoder;
  std::vector<Tensor> inputs;
  if (workload == "sr-infer") {
    sr = std::make_unique<models::SrLite>(models::SrConfig{}, gen);
    jit = std::make_unique<graph::Jit>([&](const std::vector<Var>& in) { return std::vector<Var>{(*sr)(in[0])}; },
                                       std::vector<graph::InputSpec>{{"image", {1, 3, -1, -1}}}, false, level, amp);
    Tensor x = Tensor::empty({1, 3, size, size});
    gen.uniform_(x);
    inputs = {x};
    call = [&] { (*jit)(inputs); };
  } else if (workload == "sr-train") {
    sr = std::make_unique<models::SrLite>(models::SrConfig{}, gen);
    kernels::AdamWParams hp;
    hp.lr = 1e-3;
    hp.weight_decay = 0;
    actors::ParallelConfig options;
    options.jit_level = level;
    options.amp = amp;
    train = std::make_unique<actors::ParallelTraining>(
        actors::TrainingProblem{sr.get(),
                                [&](const std::vector<Var>& in) { return std::vector<Var>{graph::mse_loss((*sr)(in[0]), in[1])}; },
                                {{"x", {b, 3, 64, 64}}, {"y", {b, 3, 128, 128}}}, 4,
                                [hp](const std::vector<Var>& p) { return std::make_shared<graph::AdamW>(p, hp); }, {}},
        options);
    Tensor x = Tensor::empty({4, 3, 64, 64}), y = Tensor::empty({4, 3, 128, 128});
    gen.uniform_(x);
    gen.uniform_(y);
    inputs = {x, y};
    call = [&] { train->step(inputs); };
  } else {
    gpt = std::make_unique<models::Gpt>(models::GptConfig{}, gen);
    Tensor ids = Tensor::empty({8, 128}, DType::i64), targets = Tensor::empty({8, 128}, DType::i64);
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      ids.data<std::int64_t>()[i] = (i * 7919) % 256;
      targets.data<std::int64_t>()[i] = (i * 104729) % 256;
    }
    // gpt-mini's training loss and its batch, for gpt-train and gpt-train-floor.
    const auto gpt_loss = [&](const std::vector<Var>& in) { return std::vector<Var>{gpt->loss(in[0], in[1])}; };
    const std::vector<graph::InputSpec> gpt_batch{{"ids", {b, 128}, DType::i64}, {"targets", {b, 128}, DType::i64}};
    if (workload == "gpt-forward") {
      jit = std::make_unique<graph::Jit>([&](const std::vector<Var>& in) { return std::vector<Var>{gpt->logits(in[0])}; },
                                         std::vector<graph::InputSpec>{{"ids", {b, 128}, DType::i64}}, false, level, amp);
      inputs = {ids};
      call = [&] { (*jit)(inputs); };
    } else if (workload == "gpt-decode" || workload == "gpt-decode-recompute" || workload == "gpt-decode-bf16") {
      if (workload == "gpt-decode-bf16") gpt->to(DType::bf16);
      decoder = std::make_unique<models::GptDecoder>(*gpt, amp, workload != "gpt-decode-recompute");
      call = [&] {
        std::vector<std::int64_t> context(16);
        for (std::size_t i = 0; i < context.size(); ++i) context[i] = static_cast<std::int64_t>('a' + i);
        for (std::int64_t k = 0; k < size; ++k) {
          const std::vector<float> row = decoder->next(context);
          context.push_back(std::max_element(row.begin(), row.end()) - row.begin());
        }
      };
    } else if (workload == "gpt-decode-paths") {
      // Side by side in one process, alternating: SIZE rows' 16-token prompts and 32 greedy steps
      // called directly, as an actor program with grouped ops (the default), and ungrouped.
      engine = std::make_unique<actors::Engine>(actors::EngineOptions{static_cast<std::size_t>(threads)});
      const char* paths[] = {"direct", "actors-grouped", "actors-ungrouped"};
      std::vector<std::unique_ptr<models::GptDecoder>> decoders;
      for (int p = 0; p < 3; ++p) {
        decoders.push_back(std::make_unique<models::GptDecoder>(*gpt, amp, true));
        if (p > 0) decoders.back()->run_steps_on(*engine, 1, p == 1 ? actors::OpGrouping::inference : actors::OpGrouping::none);
      }
      std::vector<std::vector<double>> ms(3);
      for (int round = 0; round < steps + 2; ++round)
        for (int p = 0; p < 3; ++p) {
          const auto t0 = std::chrono::steady_clock::now();
          decode_batch(*decoders[static_cast<std::size_t>(p)], size);
          if (round >= 2) ms[static_cast<std::size_t>(p)].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
      for (auto& m : ms) std::sort(m.begin(), m.end());
      const double direct = ms[0][ms[0].size() / 2];
      for (int p = 0; p < 3; ++p) {
        const double median = ms[static_cast<std::size_t>(p)][ms[static_cast<std::size_t>(p)].size() / 2];
        std::printf("{\"workload\":\"gpt-decode-paths\",\"path\":\"%s\",\"isa\":\"%s\",\"openblas_core\":\"%s\",\"level\":%d,"
                    "\"threads\":%d,\"rows\":%lld,\"rounds\":%d,\"ms\":%.3f,\"ratio_to_direct\":%.3f}\n",
                    paths[p], kernels::cpu_isa(), openblas_get_corename(), level, threads, static_cast<long long>(size), steps,
                    median, median / direct);
      }
      decoders.clear();  // before the engine their programs run on
      return 0;
    } else if (workload == "gpt-decode-batch" || workload == "gpt-decode-batch-actors") {
      decoder = std::make_unique<models::GptDecoder>(*gpt, amp, true);
      if (workload == "gpt-decode-batch-actors") {
        engine = std::make_unique<actors::Engine>(actors::EngineOptions{static_cast<std::size_t>(threads)});
        decoder->run_steps_on(*engine, 1);
      }
      call = [&] { decode_batch(*decoder, size); };
    } else if (workload == "gpt-train-floor") {
      // The products of gpt-mini's level-3 training step at `amp` (as ParallelTraining compiles it,
      // batch 8), each timed alone with the kernel it runs on, on random operands.
      const graph::TracedFunction step = graph::trace(gpt_loss, gpt_batch)
                                             .with_amp(amp)
                                             .optimized(level)
                                             .with_gradients()
                                             .optimized(level);
      const graph::Graph& g = step.graph();
      const graph::SymBindings batch{{"batch", 8}};
      struct Product {
        std::string op;
        std::vector<Tensor> in, out;
        Attrs attrs;
      };
      auto products = std::make_shared<std::vector<Product>>();
      double flop = 0;
      for (const graph::Node& n : g.nodes()) {
        if (n.op != "matmul" && n.op != "matmul_bias") continue;
        Product p{n.op, {}, {}, n.attrs};
        for (graph::ValueId v : n.inputs) {
          Tensor t = Tensor::empty(graph::bind(g.value(v).info.shape, batch));
          gen.uniform_(t);
          p.in.push_back(t.to(g.value(v).info.dtype));
        }
        const Tensor& c = p.out.emplace_back(
            Tensor::empty(graph::bind(g.value(n.outputs[0]).info.shape, batch), g.value(n.outputs[0]).info.dtype));
        const std::int64_t k = p.in[0].size(n.attrs.get_int("trans_a") ? -2 : -1);
        flop += 2.0 * static_cast<double>(c.numel()) * static_cast<double>(k);
        products->push_back(std::move(p));
      }
      std::fprintf(stderr, "troupe-bench-jit: gpt-train-floor: %zu products, %.2f GFLOP\n", products->size(), flop / 1e9);
      call = [products] {
        for (Product& p : *products) dispatch(p.op, p.in, p.out, p.attrs);
      };
    } else if (workload == "gpt-train") {
      kernels::AdamWParams hp;
      hp.lr = 3e-4;
      hp.weight_decay = 0.01;
      actors::ParallelConfig options;
      options.clip = 1.0;
      options.jit_level = level;
      options.amp = amp;
      train = std::make_unique<actors::ParallelTraining>(
          actors::TrainingProblem{gpt.get(), gpt_loss, gpt_batch, 8,
                                  [hp](const std::vector<Var>& p) { return std::make_shared<graph::AdamW>(p, hp); }, {}},
          options);
      inputs = {ids, targets};
      call = [&] { train->step(inputs); };
    } else {
      std::fprintf(stderr, "troupe-bench-jit: unknown workload '%s'\n", workload.c_str());
      return 2;
    }
  }
  // The arena a memory-planned (level 3) Jit or step keeps: part of its peak though held between calls.
  const auto planned = [&]() -> std::size_t {
    if (train) return train->memory_report() ? train->memory_report()->reserved_bytes : 0;
    if (!jit || !jit->traced() || !jit->traced_function().plans_memory()) return 0;
    return jit->traced_function().memory_report().reserved_bytes;
  };
  std::vector<double> ms;
  std::size_t peak = 0;
  std::uint64_t allocs = 0;
  for (int i = 0; i < steps + 2; ++i) {
    const std::size_t held = cpu_allocator().stats().current_bytes;
    cpu_allocator().reset_stats();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    const AllocatorStats s = cpu_allocator().stats();
    if (i < 2) continue;  // warm-up: caches, plans
    ms.push_back(elapsed);
    peak = std::max(peak, s.peak_bytes - held + planned());
    allocs = std::max(allocs, s.requests);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("{\"workload\":\"%s\",\"level\":%d,\"threads\":%d,\"size\":%lld,\"amp\":\"%s\",\"ms\":%.3f,"
              "\"peak_bytes\":%zu,\"planned_bytes\":%zu,\"allocs_per_step\":%llu}\n",
              workload.c_str(), level, threads, static_cast<long long>(size), graph::to_string(amp.level), ms[ms.size() / 2],
              peak, planned(), static_cast<unsigned long long>(allocs));
  return 0;
}
