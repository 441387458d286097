// troupe-gpt: trains a byte-level GPT ("gpt-mini" by default) on the actor runtime, and samples
// text from its checkpoints.
//   troupe-gpt [training flags]                       train (see --help)
//   troupe-gpt generate --checkpoint DIR --prompt "..." sample from a checkpoint
// JIT_LEVEL=0 runs the same steps eagerly; GRAD_MODE=standard takes the naive clip path.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "troupe/actors/engine.hpp"
#include "troupe/apps/checkpoint.hpp"
#include "troupe/apps/cli.hpp"
#include "troupe/apps/corpus.hpp"
#include "troupe/apps/data_parallel.hpp"
#include "troupe/apps/gpt_model.hpp"
#include "troupe/apps/splitmix.hpp"
#include "troupe/apps/grad_mode.hpp"
#include "troupe/apps/memory_budget.hpp"
#include "troupe/apps/resume.hpp"
#include "troupe/apps/train_loop.hpp"
#include "troupe/apps/train_step.hpp"
#include "troupe/apps/weights.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/threading.hpp"

using namespace troupe;
using graph::Var;

namespace {

struct TrainFlags {
  apps::GptConfig model;
  apps::RunFlags run;
  std::int64_t batch = 8, val_batches = 4;
  double lr = 3e-4, weight_decay = 0.01, val_fraction = 0.1;
  std::uint64_t seed = 1;
  std::string data, load_weights;
  int dp = 1;
  double comm_fusion_mb = 64;
  bool check_grads = false;
  TrainFlags() { run.clip = 1.0; }
};

struct GenerateFlags {
  std::string checkpoint, weights, prompt = "\n";
  apps::GptConfig model;
  std::int64_t tokens = 200, top_k = 40;
  double temperature = 0.8;
  std::uint64_t seed = 1;
};

void add_model_flags(CLI::App& app, apps::GptConfig& m) {
  app.add_option("--d-model", m.d_model, "model width")->capture_default_str()->check(apps::in_range(1, 65536));
  app.add_option("--layers", m.layers, "Transformer blocks")->capture_default_str()->check(apps::in_range(1, 4096));
  app.add_option("--heads", m.heads, "attention heads (must divide --d-model)")
      ->capture_default_str()->check(apps::in_range(1, 65536));
  app.add_option("--d-ff", m.d_ff, "MLP hidden size")->capture_default_str()->check(apps::in_range(1, 1 << 20));
  app.add_option("--seq", m.seq, "context length in bytes")->capture_default_str()->check(apps::in_range(1, 1 << 20));
}

// The run's settings as checkpoint fields, so --resume and generate rebuild the same model.
void store_config(const apps::GptConfig& m, apps::CheckpointState& s) {
  s.ints["vocab"] = m.vocab;
  s.ints["d_model"] = m.d_model;
  s.ints["layers"] = m.layers;
  s.ints["heads"] = m.heads;
  s.ints["d_ff"] = m.d_ff;
  s.ints["seq"] = m.seq;
}
// The model of a checkpoint: its settings replace the model flags, which may only repeat them.
void take_config(apps::ResumeSettings& settings, const apps::CheckpointState& state, apps::GptConfig& m) {
  m.vocab = state.int_at("vocab");
  settings.take("--d-model", "d_model", m.d_model);
  settings.take("--layers", "layers", m.layers);
  settings.take("--heads", "heads", m.heads);
  settings.take("--d-ff", "d_ff", m.d_ff);
  settings.take("--seq", "seq", m.seq);
}

// Checks the model settings; those of a checkpoint name its state.json when they make no sense.
void validate(const apps::GptConfig& m, const std::string& state_file) {
  if (state_file.empty()) return m.validate();
  apps::naming_file(state_file, "holds a model that cannot be built", "the file is damaged or from another version", [&] {
    m.validate();
    TROUPE_CHECK(m.vocab == 256, invalid_argument, "vocab is ", m.vocab, ", but troupe-gpt models bytes (256)");
  });
}

int train(TrainFlags f, CLI::App& app) {
  const apps::GradMode mode = apps::grad_mode();
  const int jit = graph::jit_level();
  apps::LoopOptions lo = apps::loop_options(f.run);
  TROUPE_CHECK(f.run.resume.empty() || f.load_weights.empty(), invalid_argument,
               "--resume and --load-weights both give the starting weights; pass one of them");
  std::optional<apps::Checkpoint> resumed;
  std::optional<apps::ResumeSettings> settings;
  if (!f.run.resume.empty()) {
    // The checkpoint decides the model, the data and the batch; flags may only repeat them.
    resumed = apps::load_checkpoint(f.run.resume, "troupe-gpt");
    settings.emplace(app, resumed->state);
    take_config(*settings, resumed->state, f.model);
    settings->take("--batch", "batch", f.batch);
    settings->take("--seed", "seed", f.seed);
    settings->take("--data", "data", f.data, /*is_path=*/true);
  }
  validate(f.model, resumed ? resumed->state.source : "");
  char sizes[160];
  std::snprintf(sizes, sizeof sizes, "--d-model %lld --layers %lld --d-ff %lld --seq %lld --batch %lld",
                static_cast<long long>(f.model.d_model), static_cast<long long>(f.model.layers),
                static_cast<long long>(f.model.d_ff), static_cast<long long>(f.model.seq), static_cast<long long>(f.batch));
  apps::require_memory(apps::gpt_training_bytes(f.model, f.batch), sizes,
                       "use a smaller --batch or --seq, or a smaller model");

  apps::DataParallelJob job(f.dp);
  if (!f.run.save.empty() && job.rank() == 0) apps::prepare_save_folder(f.run.save, f.run.resume);
  const apps::Corpus corpus = apps::load_corpus(f.data);
  const auto [train_bytes, val_bytes] = apps::split_corpus(corpus.bytes, f.val_fraction, f.model.seq, corpus.source);
  // Every rank draws the global batch and keeps its rows, so N ranks see what one process at N
  // times the batch would.
  apps::WindowSampler train_data(train_bytes, f.model.seq, f.batch * job.size(), f.seed, "the training split");
  apps::WindowSampler val_data(val_bytes, f.model.seq, f.batch, f.seed + 1, "the held-out split");

  Generator gen(f.seed);
  apps::Gpt model(f.model, gen);
  kernels::AdamWParams hp;
  hp.lr = f.lr;
  hp.weight_decay = f.weight_decay;
  auto optimizer = std::make_shared<graph::AdamW>(model.parameters(), hp);
  std::int64_t start_step = 0;
  if (resumed) {
    apps::load_weights_into(model, resumed->model, resumed->folder + "/model.safetensors",
                            "the checkpoint is damaged or from another model");
    apps::load_optimizer_state(*optimizer, resumed->optimizer, resumed->folder + "/optimizer.safetensors");
    settings->settle_lr(*optimizer, f.lr);
    start_step = resumed->state.int_at("step");
    train_data.set_position(static_cast<std::uint64_t>(resumed->state.int_at("data_position")));
  } else if (!f.load_weights.empty()) {
    apps::load_weights_into(model,
                            apps::from_nanogpt_names(apps::read_weights(f.load_weights, "--load-weights takes a .safetensors file")),
                            f.load_weights, "give the model flags it was saved with (--d-model, --layers, --heads, --d-ff, --seq)");
  }

  apps::TrainStepOptions step_setup = apps::step_options(f.run, f.batch);
  step_setup.mode = mode;
  step_setup.jit_level = jit;
  const int threads = step_setup.threads, micro_batches = step_setup.micro_batches;
  set_kernel_threads(1);  // parallelism comes from actors running concurrently, not from inside a GEMM
  std::printf("troupe-gpt: %lld parameters (d_model %lld, %lld layers, %lld heads, d_ff %lld, seq %lld), batch %lld\n",
              static_cast<long long>(model.parameter_count()), static_cast<long long>(f.model.d_model),
              static_cast<long long>(f.model.layers), static_cast<long long>(f.model.heads),
              static_cast<long long>(f.model.d_ff), static_cast<long long>(f.model.seq), static_cast<long long>(f.batch));
  std::printf("troupe-gpt: data: %s, %zu training / %zu held-out bytes\n", corpus.source.c_str(), train_bytes.size(),
              val_bytes.size());
  std::printf("troupe-gpt: GRAD_MODE=%s, JIT_LEVEL=%d (%s), %d threads, %d micro-batches%s\n", apps::to_string(mode), jit,
              jit == 0 ? "eager" : "actor graph", threads, jit == 0 ? 1 : micro_batches,
              resumed ? (", resuming at step " + std::to_string(start_step)).c_str() : "");
  if (resumed)
    std::printf("troupe-gpt: resuming '%s'; %s\n", f.run.resume.c_str(), settings->summary().c_str());
  if (job.size() > 1)
    std::printf("troupe-gpt: data parallel: rank %d of %d (%s), per-rank batch %lld, global batch %lld, fusion %.0f MiB\n",
                job.rank(), job.size(), job.source().c_str(), static_cast<long long>(f.batch),
                static_cast<long long>(f.batch * job.size()), f.comm_fusion_mb);

  auto loss_fn = [&](const std::vector<Var>& in) { return std::vector<Var>{model.loss(in[0], in[1])}; };
  const graph::SymDim b = graph::SymDim::symbol("batch");
  const std::vector<graph::InputSpec> signature = {{"ids", {b, f.model.seq}, DType::i64}, {"targets", {b, f.model.seq}, DType::i64}};
  step_setup.data_parallel = job.options(f.comm_fusion_mb);
  apps::TrainStep train_step(loss_fn, signature, model, optimizer, step_setup);
  train_step.measure_gradients(!f.run.metrics.empty());
  std::unique_ptr<actors::Program> eval_program;
  if (train_step.engine()) {
    actors::ProgramOptions eo;
    eo.micro_batches = micro_batches;
    eval_program = train_step.engine()->compile(graph::trace(loss_fn, signature), eo);
  }

  apps::LoopHooks hooks;
  std::int64_t step_number = start_step;
  hooks.step = [&] {
    auto [ids, targets] = train_data.next();
    const std::int64_t r = job.rank();
    const apps::StepOutcome out = train_step({ids.slice(0, r * f.batch, (r + 1) * f.batch).contiguous(),
                                              targets.slice(0, r * f.batch, (r + 1) * f.batch).contiguous()});
    ++step_number;
    if (f.check_grads)
      for (const std::string& w : job.compare_bucket_norms(step_number, out.bucket_squared_norms))
        std::fprintf(stderr, "troupe-gpt: %s\n", w.c_str());
    return out;
  };
  hooks.evaluate = [&] {
    val_data.set_position(0);  // the same held-out windows every time
    double total = 0;
    for (std::int64_t k = 0; k < f.val_batches; ++k) {
      auto [ids, targets] = val_data.next();
      if (eval_program) {
        total += eval_program->run({ids, targets}).outputs[0].item();
      } else {
        graph::NoGradGuard no_grad;
        total += model.loss(Var(ids), Var(targets)).tensor().item();
      }
    }
    return total / static_cast<double>(f.val_batches);
  };
  if (!f.run.save.empty() && job.rank() == 0)  // the ranks hold the same model: rank 0 saves it
    hooks.save = [&](std::int64_t step) {
      apps::CheckpointState st;
      store_config(f.model, st);
      st.ints["step"] = step;
      st.ints["batch"] = f.batch;
      st.ints["seed"] = static_cast<std::int64_t>(f.seed);
      st.ints["data_position"] = static_cast<std::int64_t>(train_data.position());
      st.strings["app"] = "troupe-gpt";
      st.strings["data"] = f.data;
      apps::save_checkpoint(f.run.save, step, model.state_dict(), optimizer->state_dict(), st);
    };

  lo.start_step = start_step;
  if (job.rank() > 0) lo.metrics_path = lo.trace_path = "";  // rank 0 writes the run's files
  lo.items_per_step = static_cast<double>(f.batch * f.model.seq);
  lo.unit = "tok/s";
  const apps::LoopSummary s = apps::run_training_loop(lo, hooks);
  std::string dp_fields;
  if (job.size() > 1) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ",\"dp\":%d,\"rank\":%d,\"comm_ms\":%.2f,\"exposed_comm_ms\":%.2f,\"hidden_fraction\":%.3f",
                  job.size(), job.rank(), s.comm_ms, s.exposed_comm_ms,
                  s.comm_ms > 0 ? std::max(0.0, 1.0 - s.exposed_comm_ms / s.comm_ms) : 0.0);
    dp_fields = buf;
  }
  std::printf("{\"app\":\"troupe-gpt\",\"steps\":%lld,\"train_loss\":%.5f,\"val_loss\":%.5f,\"ms_per_step\":%.2f,"
              "\"tokens_per_s\":%.1f,\"params\":%lld,\"peak_bytes\":%zu%s}\n",
              static_cast<long long>(s.steps), s.train_loss, s.eval, s.ms_per_step, s.items_per_s,
              static_cast<long long>(model.parameter_count()), cpu_allocator().stats().peak_bytes, dp_fields.c_str());
  return 0;
}

int generate(GenerateFlags f, CLI::App& app) {
  TROUPE_CHECK(f.checkpoint.empty() != f.weights.empty(), invalid_argument,
               "generate needs exactly one of --checkpoint DIR or --weights FILE.safetensors");
  std::map<std::string, Tensor> weights;
  std::string file, advice;
  if (!f.checkpoint.empty()) {
    apps::Checkpoint c = apps::load_checkpoint(f.checkpoint, "troupe-gpt");
    apps::ResumeSettings settings(app, c.state);
    take_config(settings, c.state, f.model);
    validate(f.model, c.state.source);
    weights = std::move(c.model);
    file = c.folder + "/model.safetensors";
    advice = "the checkpoint is damaged or from another model";
  } else {
    weights = apps::from_nanogpt_names(apps::read_weights(f.weights, "--weights takes a .safetensors file"));
    file = f.weights;
    advice = "give the model flags it was saved with (--d-model, --layers, --heads, --d-ff, --seq)";
  }
  Generator gen(0);
  apps::Gpt model(f.model, gen);
  apps::load_weights_into(model, weights, file, advice);
  set_kernel_threads(1);
  std::vector<std::int64_t> context(f.prompt.begin(), f.prompt.end());
  for (auto& c : context) c = static_cast<unsigned char>(c);
  if (context.empty()) context.push_back('\n');
  std::printf("%s", f.prompt.c_str());
  std::uint64_t rng = f.seed;
  graph::NoGradGuard no_grad;
  for (std::int64_t k = 0; k < f.tokens; ++k) {
    const std::int64_t t = std::min<std::int64_t>(static_cast<std::int64_t>(context.size()), f.model.seq);
    const std::vector<std::int64_t> window(context.end() - t, context.end());
    const Tensor logits = model.logits(Var(Tensor::from_vector(window, {1, t}))).tensor();
    std::vector<float> row = logits.slice(1, t - 1, t).contiguous().to_vector<float>();
    std::int64_t next = 0;
    if (f.temperature == 0) {
      next = std::max_element(row.begin(), row.end()) - row.begin();
    } else {
      // Keep the top-k logits, then sample from softmax(logits / temperature).
      std::vector<float> sorted = row;
      const std::size_t k_keep = f.top_k > 0 ? std::min<std::size_t>(f.top_k, row.size()) : row.size();
      std::nth_element(sorted.begin(), sorted.begin() + (k_keep - 1), sorted.end(), std::greater<float>());
      const float cutoff = sorted[k_keep - 1], top = *std::max_element(row.begin(), row.end());
      std::vector<double> p(row.size());
      double z = 0;
      for (std::size_t i = 0; i < row.size(); ++i) z += p[i] = row[i] >= cutoff ? std::exp((row[i] - top) / f.temperature) : 0.0;
      double u = apps::uniform01(rng) * z;
      for (next = 0; next + 1 < static_cast<std::int64_t>(p.size()) && u >= p[static_cast<std::size_t>(next)]; ++next)
        u -= p[static_cast<std::size_t>(next)];
    }
    context.push_back(next);
    std::putchar(static_cast<int>(next));
    std::fflush(stdout);
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"troupe-gpt: train a byte-level GPT on the actor runtime, or sample text from a checkpoint"};
  TrainFlags tf;
  add_model_flags(app, tf.model);
  app.add_option("--batch", tf.batch, "sequences per step")->capture_default_str()->check(apps::in_range(1, 1 << 20));
  app.add_option("--lr", tf.lr, "AdamW learning rate")->capture_default_str()->check(apps::open_range(0, 10));
  app.add_option("--weight-decay", tf.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str()->check(apps::in_range(0, 10));
  app.add_option("--seed", tf.seed, "seed of the initial weights and of the data order")->capture_default_str();
  app.add_option("--data", tf.data, "corpus file (default: the texts under /usr/share/common-licenses)");
  app.add_option("--val-fraction", tf.val_fraction, "held-out tail of the corpus")
      ->capture_default_str()->check(apps::open_range(0, 1, "a fraction of the corpus"));
  app.add_option("--val-batches", tf.val_batches, "held-out batches per validation")
      ->capture_default_str()->check(apps::in_range(1, 1e6));
  app.add_option("--load-weights", tf.load_weights, "start from these weights (.safetensors, Troupe or nanoGPT names)");
  app.add_option("--dp", tf.dp, "data-parallel ranks (run under troupe-launch -n N, mpirun or Slurm)")
      ->capture_default_str()->check(apps::in_range(1, 1024));
  app.add_option("--comm-fusion-mb", tf.comm_fusion_mb, "AllReduce bucket size limit in MiB")
      ->capture_default_str()->check(apps::open_range(0, 1 << 20, "MiB"));
  app.add_flag("--check-grads", tf.check_grads, "compare the ranks' post-reduce gradient norms every step and warn when they differ");
  apps::add_run_flags(app, tf.run);
  GenerateFlags gf;
  CLI::App* gen = app.add_subcommand("generate", "sample text from a checkpoint or a weights file");
  gen->add_option("--checkpoint", gf.checkpoint, "a folder written by --save");
  gen->add_option("--weights", gf.weights, "a .safetensors file (give the model flags to match it)");
  add_model_flags(*gen, gf.model);
  gen->add_option("--prompt", gf.prompt, "text to continue");
  gen->add_option("--tokens", gf.tokens, "bytes to generate")->capture_default_str()->check(apps::in_range(0, 1e9));
  gen->add_option("--temperature", gf.temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str()->check(apps::in_range(0, 100, "0 = greedy"));
  gen->add_option("--top-k", gf.top_k, "sample among the k most likely bytes (0 = all)")
      ->capture_default_str()->check(apps::in_range(0, 256, "0 = all"));
  gen->add_option("--seed", gf.seed, "sampling seed")->capture_default_str();
  return apps::run_cli(app, argc, argv, "troupe-gpt", [&] { return gen->parsed() ? generate(gf, *gen) : train(tf, app); });
}
