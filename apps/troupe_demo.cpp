// troupe-demo: a short tour. The kernels layer (tensors and views, the caching allocator,
// counter-based random fills, a GEMM timed against its FLOP count, activations), then a GPT block
// trained for a few steps as an actor graph (2 micro-batches, AdamW as an optimizer actor).
// Usage: troupe-demo [--trace out.json]   (--trace writes the message flow of the last step)
#include <chrono>
#include <cstdio>

#include <cstring>
#include <memory>

#include "troupe/actors/engine.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/apps/cli.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/matmul.hpp"
#include "troupe/kernels/rng.hpp"
#include "troupe/kernels/tensor.hpp"
#include "troupe/version.hpp"

using namespace troupe;

namespace {
// Trains a GPT block (d 64, 4 heads, sequence 16) to map x to x @ M for a fixed random M.
void train_gpt_block(const char* trace_path) {
  using namespace troupe::graph;
  Generator gen(7);
  GPTBlock block(64, 4, gen);
  Tensor x = Tensor::empty({8, 16, 64}), m = Tensor::empty({64, 64});
  gen.normal_(x);
  gen.normal_(m, 0.0, 0.125);
  const Tensor target = kernels::matmul(x, m);
  auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{mse_loss(block(in[0]), in[1])}; };
  const SymDim batch = SymDim::symbol("batch");
  actors::Engine engine;
  actors::ProgramOptions options;
  options.micro_batches = 2;
  kernels::AdamWParams hp;
  hp.lr = 3e-3;
  hp.weight_decay = 0.0;
  options.optimizers = {std::make_shared<AdamW>(block.parameters(), hp)};
  auto program = engine.compile(trace(loss, {{"x", {batch, 16, 64}}, {"y", {batch, 16, 64}}}).with_gradients(), options);
  const auto counts = program->actor_counts();
  std::printf("\nGPT block as an actor graph: %d op actors, %d gradient stages, %d optimizer actor, %zu scheduler threads\n",
              counts.at("op"), counts.at("gradient"), counts.at("optimizer"), engine.threads());
  const int steps = 30;
  for (int step = 1; step <= steps; ++step) {
    if (step == steps && trace_path) actors::Tracer::instance().enable(true);
    const auto t0 = std::chrono::steady_clock::now();
    const actors::StepResult r = program->run({x, target});
    const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    if (step == 1 || step % 10 == 0) std::printf("step %2d: loss %.5f (%.1f ms)\n", step, r.outputs[0].item(), ms);
  }
  if (trace_path) {
    actors::Tracer::instance().enable(false);
    actors::Tracer::instance().write_chrome_json(trace_path);
    std::printf("message flow of the last step written to %s (open it in Perfetto, or: troupe-trace summary %s)\n",
                trace_path, trace_path);
  }
}
}  // namespace

int main(int argc, char** argv) {
  const char* trace_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--trace") == 0 && i + 1 < argc) trace_path = argv[++i];
    else if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("troupe-demo %s\n", TROUPE_VERSION);
      return 0;
    } else {
      std::fprintf(stderr, "usage: troupe-demo [--trace out.json] [--version]\n");
      return 2;
    }
  }
  return apps::run_guarded("troupe-demo", [&] {
    Generator gen(42);
    Tensor x = Tensor::empty({2, 3});
    gen.uniform_(x, -1, 1);
    Tensor xt = x.transpose(0, 1);
    std::printf("x  = %s, x.T = %s (a view: contiguous=%d, same storage=%d)\n", x.str().c_str(), xt.str().c_str(),
                xt.is_contiguous(), xt.storage() == x.storage());
    auto xv = x.to_vector<float>();
    std::printf("x values:");
    for (float v : xv) std::printf(" %+.4f", v);
    std::printf("\nrelu(x):");
    for (float v : kernels::relu(x).to_vector<float>()) std::printf(" %+.4f", v);
    std::printf("\ngelu(x):");
    for (float v : kernels::gelu(x).to_vector<float>()) std::printf(" %+.4f", v);
    std::printf("\n");

    const std::int64_t n = 512;
    Tensor a = Tensor::empty({n, n}), b = Tensor::empty({n, n});
    gen.normal_(a);
    gen.normal_(b);
    kernels::matmul(a, b);  // warm-up
    const int reps = 5;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) kernels::matmul(a, b, false, true);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("matmul %lldx%lld @ %lldx%lld^T: %.2f ms, %.1f GFLOP/s\n", (long long)n, (long long)n, (long long)n,
                (long long)n, s * 1e3, 2.0 * n * n * n / s / 1e9);

    Tensor bias = Tensor::full({n}, 0.5);
    Tensor y = kernels::add(kernels::matmul(a, b), bias);  // bias broadcasts over rows
    std::printf("(a @ b + 0.5)[0, 0] = %.5f\n", y.slice(0, 0, 1).slice(1, 0, 1).item());

    const AllocatorStats st = cpu_allocator().stats();
    std::printf("allocator: current %zu B, peak %zu B, cached %zu B, %llu requests, %llu system allocations\n",
                st.current_bytes, st.peak_bytes, st.cached_bytes, (unsigned long long)st.requests,
                (unsigned long long)st.system_allocations);
    train_gpt_block(trace_path);
    return 0;
  });
}
