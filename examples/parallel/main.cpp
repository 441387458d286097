// A small GPT trained with 2 data-parallel replicas of 2 tensor-parallel shards (Megatron's
// placement) and ZeRO-1, through <troupe/troupe.hpp> alone. Started plainly, it runs the four
// devices as threads of this process (virtual devices) and checks their losses against one process
// training the same global batch; started by a launcher (troupe-launch -n 4, mpirun -n 4), this
// process is one of the four. Prints one JSON line (rank 0); exits 1 when the model did not learn
// or the parallel run parted from the single process.
//   usage: troupe-parallel-gpt [STEPS]
#include <troupe/troupe.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace troupe;
using graph::Var;

namespace {

constexpr std::int64_t kSeq = 16, kGlobalBatch = 8;

models::GptConfig model_config() {
  models::GptConfig c;
  c.d_model = 32;
  c.heads = 4;
  c.layers = 2;
  c.d_ff = 64;
  c.seq = kSeq;
  return c;
}

// Step `step`'s global batch: windows of a short text repeated, at offsets that vary by step.
std::vector<Tensor> batch(int step) {
  static const std::string text = "the quick brown fox jumps over the lazy dog; a lazy dog sleeps while the fox runs. ";
  Tensor ids = Tensor::empty({kGlobalBatch, kSeq}, DType::i64), targets = Tensor::empty({kGlobalBatch, kSeq}, DType::i64);
  for (std::int64_t r = 0; r < kGlobalBatch; ++r)
    for (std::int64_t t = 0; t < kSeq; ++t) {
      const std::size_t at = static_cast<std::size_t>(step * 13 + r * 7 + t);
      ids.data<std::int64_t>()[r * kSeq + t] = static_cast<unsigned char>(text[at % text.size()]);
      targets.data<std::int64_t>()[r * kSeq + t] = static_cast<unsigned char>(text[(at + 1) % text.size()]);
    }
  return {ids, targets};
}

// What one device saw: each step's loss, and what it holds of the model and optimizer state.
struct DeviceRun {
  std::vector<double> losses;
  std::size_t parameter_bytes = 0, optimizer_bytes = 0;
};

// Trains the GPT for `steps` on `job`'s device with `dp` x `tp` (ZeRO-1 when dp > 1).
DeviceRun train(const std::shared_ptr<actors::Job>& job, int dp, int tp, int steps) {
  Generator gen(1);
  models::Gpt model(model_config(), gen);  // every device builds the same weights from the seed
  const graph::SymDim b = graph::SymDim::symbol("batch");
  actors::TrainingProblem problem;
  problem.model = &model;
  problem.loss = [&model](const std::vector<Var>& in) { return std::vector<Var>{model.loss(in[0], in[1])}; };
  problem.signature = {{"ids", {b, kSeq}, DType::i64}, {"targets", {b, kSeq}, DType::i64}};
  problem.global_batch = kGlobalBatch;
  problem.optimizer = [](const std::vector<Var>& parameters) {
    kernels::AdamWParams hp;
    hp.lr = 3e-3;
    hp.eps = 1e-6;
    return std::make_shared<graph::AdamW>(parameters, hp);
  };
  problem.placement = models::megatron_gpt_policy(model_config().heads);
  actors::ParallelConfig config;
  config.dp = dp;
  config.tp = tp;
  config.zero = dp > 1 ? 1 : 0;
  config.clip = 1.0;
  config.micro_batches = 2;
  config.bucket_mb = 1;
  actors::ParallelTraining training(problem, config, job);
  DeviceRun run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(training.step(batch(s)).loss);
  run.parameter_bytes = training.held_parameter_bytes();
  run.optimizer_bytes = training.held_optimizer_bytes();
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 40;
  if (steps < 2) {
    std::fprintf(stderr, "troupe-parallel-gpt: STEPS must be at least 2, got '%s'\n", argv[1]);
    return 2;
  }
  set_kernel_threads(1);  // the devices' actors run concurrently instead
  try {
    std::shared_ptr<actors::Job> launched = actors::Job::from_environment();
    const bool virtual_devices = launched->size() == 1;
    DeviceRun mine, single;
    if (virtual_devices) {
      std::vector<std::shared_ptr<actors::Job>> devices = actors::Job::virtual_devices(4);
      std::vector<DeviceRun> runs(4);
      std::vector<std::thread> threads;
      std::vector<std::exception_ptr> errors(4);
      for (int d = 0; d < 4; ++d)
        threads.emplace_back([&, d] {
          try {
            runs[static_cast<std::size_t>(d)] = train(devices[static_cast<std::size_t>(d)], 2, 2, steps);
          } catch (...) {
            errors[static_cast<std::size_t>(d)] = std::current_exception();
          }
        });
      for (std::thread& t : threads) t.join();
      for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
      mine = runs[0];
      single = train(actors::Job::virtual_devices(1)[0], 1, 1, steps);
    } else {
      mine = train(launched, 2, 2, steps);
    }
    if (launched->rank() != 0) return 0;
    const double first = mine.losses.front(), last = mine.losses.back();
    double parted = 0;  // the largest relative difference from the single process
    for (std::size_t s = 0; s < single.losses.size(); ++s)
      parted = std::max(parted, std::abs(mine.losses[s] - single.losses[s]) / std::abs(single.losses[s]));
    char compared[160] = "";  // with virtual devices, against the single process
    if (virtual_devices)
      std::snprintf(compared, sizeof compared, ",\"single_process_last_loss\":%.5f,\"largest_relative_difference\":%.2e",
                    single.losses.back(), parted);
    std::printf("{\"example\":\"parallel-gpt\",\"devices\":\"%s\",\"dp\":2,\"tp\":2,\"zero\":1,\"steps\":%d,"
                "\"first_loss\":%.5f,\"last_loss\":%.5f,\"held_parameter_bytes\":%zu,\"held_optimizer_bytes\":%zu%s}\n",
                virtual_devices ? "4 virtual" : launched->source().c_str(), steps, first, last, mine.parameter_bytes,
                mine.optimizer_bytes, compared);
    if (!(last < 0.7 * first)) {
      std::fprintf(stderr, "troupe-parallel-gpt: the loss went from %.4f to %.4f; it should have fallen by 30%%\n", first, last);
      return 1;
    }
    if (parted > 1e-3) {
      std::fprintf(stderr, "troupe-parallel-gpt: the parallel losses part from one process's by %.2e\n", parted);
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe-parallel-gpt: %s\n", e.what());
    return 1;
  }
}
