// Troupe embedded in a program of its own, through <troupe/troupe.hpp> alone: a small MLP learns
// y = sin(3 x0) + x1^2 on [-1, 1]^2 through the actor runtime (AdamW, two micro-batches) until its
// training loss falls below 0.005; its weights are saved, loaded into a fresh model and served from
// four threads at once, which must agree with one thread bit for bit. Prints one JSON line; exits
// 1 when the model did not learn or the threads disagree.
//   usage: troupe-embed-mlp OUT_DIR
#include <troupe/troupe.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace troupe;
using graph::Var;

namespace {

// Two hidden layers of 64 with gelu.
struct Mlp : graph::Module {
  explicit Mlp(Generator& gen)
      : fc1(register_module("fc1", std::make_shared<graph::Linear>(2, 64, gen))),
        fc2(register_module("fc2", std::make_shared<graph::Linear>(64, 64, gen))),
        out(register_module("out", std::make_shared<graph::Linear>(64, 1, gen))) {}
  Var operator()(const Var& x) { return (*out)(graph::gelu((*fc2)(graph::gelu((*fc1)(x))))); }
  std::shared_ptr<graph::Linear> fc1, fc2, out;
};

// `rows` points uniform in [-1, 1]^2 and their targets.
std::pair<Tensor, Tensor> batch(Generator& gen, std::int64_t rows) {
  Tensor x = Tensor::empty({rows, 2}), y = Tensor::empty({rows, 1});
  gen.uniform_(x, -1.0, 1.0);
  const float* p = x.data<float>();
  for (std::int64_t i = 0; i < rows; ++i)
    y.data<float>()[i] = static_cast<float>(std::sin(3.0 * p[2 * i]) + p[2 * i + 1] * p[2 * i + 1]);
  return {x, y};
}

int run(const std::string& out_dir) {
  const graph::SymDim rows = graph::SymDim::symbol("rows");
  Generator gen(3);
  Mlp model(gen);

  // Train: the loss traced with its gradients, compiled at JIT level 3 into an actor program.
  const auto loss = [&](const std::vector<Var>& in) { return std::vector<Var>{graph::mse_loss(model(in[0]), in[1])}; };
  const graph::TracedFunction step =
      graph::trace(loss, {{"x", {rows, 2}}, {"y", {rows, 1}}}).optimized(3).with_gradients().optimized(3);
  actors::Engine engine(actors::EngineOptions{2});
  actors::ProgramOptions options;
  kernels::AdamWParams adamw;
  adamw.lr = 3e-3;
  adamw.weight_decay = 0;
  options.optimizers = {std::make_shared<graph::AdamW>(model.parameters(), adamw)};
  options.micro_batches = 2;
  options.return_gradients = false;
  const std::unique_ptr<actors::Program> program = engine.compile(step, options);
  double average = 1.0;
  int steps = 0;
  while (steps < 4000 && (steps < 50 || average > 0.005)) {
    auto [x, y] = batch(gen, 128);
    const double l = program->run({x, y}).outputs[0].item();
    average = steps == 0 ? l : 0.95 * average + 0.05 * l;
    ++steps;
  }

  // Save, and load into a fresh model with other initial weights.
  std::filesystem::create_directories(out_dir);
  const std::string weights = out_dir + "/mlp.safetensors";
  model.save(weights);
  Generator other(99);
  Mlp served(other);
  served.load(weights);

  // Serve: one Jit, called from four threads at once and then from one.
  graph::Jit predict([&](const std::vector<Var>& in) { return std::vector<Var>{served(in[0])}; },
                     {{"x", {rows, 2}}}, false, 3);
  std::vector<std::pair<Tensor, Tensor>> queries;
  for (int q = 0; q < 8; ++q) queries.push_back(batch(gen, 256));
  std::vector<Tensor> concurrent(queries.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t q = static_cast<std::size_t>(t); q < queries.size(); q += 4)
        concurrent[q] = predict({queries[q].first})[0];
    });
  for (std::thread& t : threads) t.join();
  bool agree = true;
  double squared = 0;
  std::int64_t count = 0;
  for (std::size_t q = 0; q < queries.size(); ++q) {
    const Tensor alone = predict({queries[q].first})[0];
    agree = agree && std::memcmp(alone.data<float>(), concurrent[q].data<float>(), alone.numel() * sizeof(float)) == 0;
    for (std::int64_t i = 0; i < alone.numel(); ++i) {
      const double e = alone.data<float>()[i] - queries[q].second.data<float>()[i];
      squared += e * e;
      ++count;
    }
  }
  const double test_mse = squared / static_cast<double>(count);
  std::printf("{\"troupe\":\"%s\",\"steps\":%d,\"train_loss\":%.6f,\"test_mse\":%.6f,\"threads_agree\":%s,"
              "\"weights\":\"%s\"}\n",
              TROUPE_VERSION, steps, average, test_mse, agree ? "true" : "false", weights.c_str());
  return test_mse < 0.01 && agree ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: troupe-embed-mlp OUT_DIR\n");
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe-embed-mlp: %s\n", e.what());
    return 1;
  }
}
