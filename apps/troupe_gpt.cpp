// troupe-gpt: trains a byte-level GPT ("gpt-mini" by default) on the actor runtime, and samples
// text from its checkpoints.
//   troupe-gpt [training flags]                       train (see --help)
//   troupe-gpt generate --checkpoint DIR --prompt "..." sample from a checkpoint
//   troupe-gpt generate --model DIR --prompt "..."      sample from a GPT-2-family checkpoint (Hugging Face's layout)
// JIT_LEVEL=0 runs the same steps eagerly; GRAD_MODE=standard takes the naive clip path.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "troupe/apps/cli.hpp"
#include "troupe/apps/corpus.hpp"
#include "troupe/apps/parallel_flags.hpp"
#include "troupe/apps/plan_only.hpp"
#include "troupe/apps/memory_budget.hpp"
#include "troupe/apps/resume.hpp"
#include "troupe/apps/training_run.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/threading.hpp"
#include "troupe/models/checkpoint.hpp"
#include "troupe/models/gpt2.hpp"
#include "troupe/models/gpt2_tokenizer.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/models/gpt_decoder.hpp"
#include "troupe/models/gpt_placement.hpp"
#include "troupe/models/splitmix.hpp"
#include "troupe/models/weights.hpp"

using namespace troupe;
using graph::Var;

namespace {

struct TrainFlags {
  models::GptConfig model;
  apps::RunFlags run;
  std::int64_t batch = 8, val_batches = 4;
  double lr = 3e-4, weight_decay = 0.01, val_fraction = 0.1;
  std::uint64_t seed = 1;
  std::string data, load_weights;
  apps::ParallelFlags parallel;
  bool mesh_given = false;  // --dp or --tp: otherwise a launched job's mesh is searched, and --batch is global
  TrainFlags() { run.clip = 1.0; }
};

// What to do when a weights file does not fit the model the flags describe.
constexpr const char* kWeightsAdvice = "give the model flags it was saved with (--d-model, --layers, --heads, --d-ff, --seq)";

struct GenerateFlags {
  apps::AmpFlags amp;
  std::string checkpoint, weights, gpt2, prompt = "\n";
  models::GptConfig model;
  std::int64_t tokens = 200, top_k = 40;
  double temperature = 0.8;
  std::uint64_t seed = 1;
  bool recompute = false;  // every token recomputes its whole window instead of using the key/value cache
};

void add_model_flags(CLI::App& app, models::GptConfig& m) {
  app.add_option("--d-model", m.d_model, "model width")->capture_default_str()->check(apps::in_range(1, 65536));
  app.add_option("--layers", m.layers, "Transformer blocks")->capture_default_str()->check(apps::in_range(1, 4096));
  app.add_option("--heads", m.heads, "attention heads (must divide --d-model)")
      ->capture_default_str()->check(apps::in_range(1, 65536));
  app.add_option("--d-ff", m.d_ff, "MLP hidden size")->capture_default_str()->check(apps::in_range(1, 1 << 20));
  app.add_option("--seq", m.seq, "context length in bytes")->capture_default_str()->check(apps::in_range(1, 1 << 20));
}

// The run's settings as checkpoint fields, so --resume and generate rebuild the same model.
void store_config(const models::GptConfig& m, models::CheckpointState& s) {
  for (const auto& [key, field] : models::GptConfig::fields()) s.ints[key] = m.*field;
}
// The model of a checkpoint: its settings replace the model flags (--d-model for d_model, ...),
// which may only repeat them; vocab has no flag.
void take_config(apps::ResumeSettings& settings, const models::CheckpointState& state, models::GptConfig& m) {
  for (const auto& [key, field] : models::GptConfig::fields()) {
    if (std::string(key) == "vocab") {
      m.vocab = state.int_at(key);
      continue;
    }
    std::string flag = std::string("--") + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    settings.take(flag, key, m.*field);
  }
}

// Checks the model settings; those of a checkpoint name its state.json when they make no sense.
void validate(const models::GptConfig& m, const std::string& state_file) {
  if (state_file.empty()) return m.validate();
  models::naming_file(state_file, "holds a model that cannot be built", "the file is damaged or from another version", [&] {
    m.validate();
    TROUPE_CHECK(m.vocab == 256, invalid_argument, "vocab is ", m.vocab, ", but troupe-gpt models bytes (256)");
  });
}

// What troupe-gpt trains and validates on: the corpus split into training and held-out bytes, and
// a window sampler over each. The samplers refer to the bytes, so this never moves.
struct GptData {
  // The training batches of `ranks` ranks of `batch` rows each; the held-out ones of --batch rows.
  GptData(const TrainFlags& f, int ranks, std::int64_t batch)
      : corpus(apps::load_corpus(f.data)),
        split(apps::split_corpus(corpus.bytes, f.val_fraction, f.model.seq, corpus.source)),
        train(split.first, f.model.seq, batch * ranks, f.seed, "the training split"),
        val(split.second, f.model.seq, f.batch, f.seed + 1, "the held-out split") {}
  GptData(const GptData&) = delete;
  GptData& operator=(const GptData&) = delete;
  apps::Corpus corpus;
  std::pair<std::string, std::string> split;  // training bytes, held-out bytes
  apps::WindowSampler train, val;
};

// The checkpoint decides the model, the data and the batch; flags may only repeat them. Then the
// model must make sense and fit in memory.
void settle(apps::TrainingRun& run, TrainFlags& f) {
  if (const models::Checkpoint* c = run.resumed()) {
    take_config(run.settings(), c->state, f.model);
    // The global batch stays; a run of another layout splits it among its own replicas.
    if (c->state.ints.count("global_batch"))
      run.settings().take_divided("--batch", "global_batch", f.parallel.dp, f.batch);
    else
      run.settings().take("--batch", "batch", f.batch);
    run.settings().take("--seed", "seed", f.seed);
    run.settings().take("--data", "data", f.data, /*is_path=*/true);
    if (run.settings().has("dropout") && (c->state.string_at("dropout") != "0" || run.settings().given("--dropout")))
      run.settings().take("--dropout", "dropout", f.model.dropout);
  }
  validate(f.model, run.state_file());
  char sizes[160];
  std::snprintf(sizes, sizeof sizes, "--d-model %lld --layers %lld --d-ff %lld --seq %lld --batch %lld",
                static_cast<long long>(f.model.d_model), static_cast<long long>(f.model.layers),
                static_cast<long long>(f.model.d_ff), static_cast<long long>(f.model.seq), static_cast<long long>(f.batch));
  apps::require_memory(apps::gpt_training_bytes(f.model, f.batch), sizes,
                       "use a smaller --batch or --seq, or a smaller model");
}

// The start-up lines about the model and the data.
std::vector<std::string> start_lines(const TrainFlags& f, const GptData& data, const models::Gpt& model) {
  char line[256];
  std::snprintf(line, sizeof line, "%lld parameters (d_model %lld, %lld layers, %lld heads, d_ff %lld, seq %lld), batch %lld",
                static_cast<long long>(model.parameter_count()), static_cast<long long>(f.model.d_model),
                static_cast<long long>(f.model.layers), static_cast<long long>(f.model.heads),
                static_cast<long long>(f.model.d_ff), static_cast<long long>(f.model.seq), static_cast<long long>(f.batch));
  std::string model_line = line;
  if (f.model.dropout > 0) model_line += ", dropout " + apps::exact_text(f.model.dropout) + " while training";
  return {model_line, "data: " + data.corpus.source + ", " + std::to_string(data.split.first.size()) + " training / " +
                    std::to_string(data.split.second.size()) + " held-out bytes"};
}

// The run's settings: batch, AdamW, the step's inputs, data parallelism and the throughput unit.
apps::TrainingSetup setup(const TrainFlags& f) {
  apps::TrainingSetup s;
  s.batch = f.batch;
  s.lr = f.lr;
  s.weight_decay = f.weight_decay;
  s.seed = f.seed;
  const graph::SymDim b = graph::SymDim::symbol("batch");
  s.signature = {{"ids", {b, f.model.seq}, DType::i64}, {"targets", {b, f.model.seq}, DType::i64}};
  s.parallel = f.parallel;
  s.placement = models::megatron_gpt_policy(f.model.heads);
  s.search_mesh = !f.mesh_given;
  s.weights_advice = kWeightsAdvice;
  s.forward_program = true;  // the held-out loss runs as an actor program too
  s.items_per_step = static_cast<double>(f.batch * f.model.seq);
  s.unit = "tok/s";
  return s;
}

// troupe-gpt's parts of the run; `data` and `model` are built by the run and live in train().
apps::TrainingParts parts(const TrainFlags& f, std::optional<GptData>& data, std::optional<models::Gpt>& model) {
  apps::TrainingParts p;
  p.load_data = [&](int ranks, std::int64_t batch) { data.emplace(f, ranks, batch); };
  p.build_model = [&]() -> graph::Module& {
    Generator gen(f.seed);
    return model.emplace(f.model, gen);
  };
  p.weight_names = models::from_nanogpt_names;
  p.data_position = [&] { return data->train.position(); };
  p.set_data_position = [&](std::uint64_t position) { data->train.set_position(position); };
  p.describe = [&] { return start_lines(f, *data, *model); };
  p.loss = [&](const std::vector<Var>& in) { return std::vector<Var>{model->loss(in[0], in[1])}; };
  p.stages = {"GPT blocks", static_cast<int>(f.model.layers),
              [&](const plan::StageSpan& span, const std::vector<Var>& in) { return model->stage(span, in); }};
  p.next_batch = [&] {
    auto [ids, targets] = data->train.next();
    return std::vector<Tensor>{ids, targets};
  };
  p.evaluate = [&](const apps::ForwardLoss& loss) {
    data->val.set_position(0);  // the same held-out windows every time
    double total = 0;
    for (std::int64_t k = 0; k < f.val_batches; ++k) {
      auto [ids, targets] = data->val.next();
      total += loss({ids, targets});
    }
    return total / static_cast<double>(f.val_batches);
  };
  p.store_settings = [&](models::CheckpointState& st) {
    store_config(f.model, st);
    st.ints["batch"] = f.batch;
    st.ints["global_batch"] = f.batch * f.parallel.dp;
    st.ints["seed"] = static_cast<std::int64_t>(f.seed);
    st.strings["data"] = f.data;
    st.strings["dropout"] = apps::exact_text(f.model.dropout);
  };
  p.summary_fields = [](const apps::LoopSummary& s) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "\"train_loss\":%.5f,\"val_loss\":%.5f,\"ms_per_step\":%.2f,\"tokens_per_s\":%.1f",
                  s.train_loss, s.eval, s.ms_per_step, s.items_per_s);
    return std::string(buf);
  };
  return p;
}

int train(TrainFlags f, CLI::App& app) {
  apps::TrainingRun run(app, "troupe-gpt", f.run, f.load_weights);
  settle(run, f);
  std::optional<GptData> data;
  std::optional<models::Gpt> model;
  return run.train(setup(f), parts(f, data, model));
}

// The model generate samples from: troupe-gpt's own (a checkpoint, or weights shaped by the flags),
// or a GPT-2-family checkpoint folder with its tokenizer.
std::unique_ptr<models::Gpt> generation_model(GenerateFlags& f, CLI::App& app, std::optional<models::Gpt2Tokenizer>& tokenizer) {
  TROUPE_CHECK(!f.checkpoint.empty() + !f.weights.empty() + !f.gpt2.empty() == 1, invalid_argument,
               "generate needs exactly one of --checkpoint DIR, --weights FILE.safetensors or --model DIR (a GPT-2 checkpoint)");
  if (!f.gpt2.empty()) {
    auto model = models::load_gpt2(f.gpt2);
    tokenizer = models::Gpt2Tokenizer::load(f.gpt2);
    TROUPE_CHECK(tokenizer->vocab_size() <= model->config.vocab, invalid_argument, "--model ", f.gpt2, ": the tokenizer has ",
                 tokenizer->vocab_size(), " tokens but the model only ", model->config.vocab,
                 " (vocab_size); vocab.json belongs to another model");
    return model;
  }
  std::map<std::string, Tensor> weights;
  std::string file, advice;
  if (!f.checkpoint.empty()) {
    models::Checkpoint c = models::load_checkpoint(f.checkpoint, "troupe-gpt");
    apps::ResumeSettings settings(app, c.state);
    take_config(settings, c.state, f.model);
    validate(f.model, c.state.source);
    weights = std::move(c.model);
    file = c.folder + "/model.safetensors";
    advice = "the checkpoint is damaged or from another model";
  } else {
    weights = models::from_nanogpt_names(models::read_weights(f.weights, "--weights takes a .safetensors file"));
    file = f.weights;
    advice = kWeightsAdvice;
  }
  Generator gen(0);
  auto model = std::make_unique<models::Gpt>(f.model, gen);
  models::load_weights_into(*model, weights, file, advice);
  return model;
}

int generate(GenerateFlags f, CLI::App& app) {
  std::optional<models::Gpt2Tokenizer> tokenizer;
  const std::unique_ptr<models::Gpt> model = generation_model(f, app, tokenizer);
  const graph::AmpOptions amp = apps::resolve_amp(f.amp, graph::jit_level(), "troupe-gpt");
  set_kernel_threads(1);
  // A GPT-2 model reads BPE tokens and stops at <|endoftext|>; troupe-gpt's own reads bytes.
  std::vector<std::int64_t> context;
  std::optional<std::int64_t> end;
  if (tokenizer) {
    context = tokenizer->encode(f.prompt);
    end = tokenizer->end_of_text();
    if (context.empty()) {
      TROUPE_CHECK(end.has_value(), invalid_argument, "--prompt is empty and ", f.gpt2,
                   "/vocab.json has no <|endoftext|> to start from; give a prompt");
      context.push_back(*end);
    }
  } else {
    for (char c : f.prompt) context.push_back(static_cast<unsigned char>(c));
    if (context.empty()) context.push_back('\n');
  }
  std::printf("%s", f.prompt.c_str());
  std::uint64_t rng = f.seed;
  graph::NoGradGuard no_grad;
  models::GptDecoder decoder(*model, amp, !f.recompute);
  for (std::int64_t k = 0; k < f.tokens; ++k) {
    const std::vector<float> row = decoder.next(context);
    const std::int64_t next = models::sample_token(row, f.temperature, f.top_k, rng);
    if (end && next == *end) break;
    context.push_back(next);
    const std::string bytes = tokenizer ? tokenizer->token_bytes(next) : std::string(1, static_cast<char>(next));
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
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
  app.add_option("--batch", tf.batch, "sequences per step (per data-parallel replica with --dp; the whole step's when a launched "
                 "job's mesh is searched)")->capture_default_str()->check(apps::in_range(1, 1 << 20));
  app.add_option("--lr", tf.lr, "AdamW learning rate")->capture_default_str()->check(apps::open_range(0, 10));
  app.add_option("--weight-decay", tf.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str()->check(apps::in_range(0, 10));
  app.add_option("--seed", tf.seed, "seed of the initial weights, the data order and dropout")->capture_default_str();
  app.add_option("--dropout", tf.model.dropout, "dropout on the attention probabilities and both residual branches while "
                 "training (off at evaluation and when sampling)")->capture_default_str()->check(apps::in_range(0, 0.99));
  app.add_option("--data", tf.data, "corpus file (default: the texts under /usr/share/common-licenses)");
  app.add_option("--val-fraction", tf.val_fraction, "held-out tail of the corpus")
      ->capture_default_str()->check(apps::open_range(0, 1, "a fraction of the corpus"));
  app.add_option("--val-batches", tf.val_batches, "held-out batches per validation")
      ->capture_default_str()->check(apps::in_range(1, 1e6));
  app.add_option("--load-weights", tf.load_weights, "start from these weights (.safetensors, Troupe or nanoGPT names)");
  apps::add_data_parallel_flags(app, tf.parallel);
  apps::add_hybrid_parallel_flags(app, tf.parallel);
  apps::add_run_flags(app, tf.run);
  GenerateFlags gf;
  CLI::App* gen = app.add_subcommand("generate", "sample text from a checkpoint or a weights file");
  gen->add_option("--checkpoint", gf.checkpoint, "a folder written by --save");
  gen->add_option("--weights", gf.weights, "a .safetensors file (give the model flags to match it)");
  gen->add_option("--model", gf.gpt2, "a GPT-2-family checkpoint folder in Hugging Face's layout (config.json, "
                  "model.safetensors, and its tokenizer's vocab.json and merges.txt)");
  add_model_flags(*gen, gf.model);
  gen->add_option("--prompt", gf.prompt, "text to continue");
  gen->add_option("--tokens", gf.tokens, "tokens to generate (bytes for troupe-gpt's byte-level model)")->capture_default_str()->check(apps::in_range(0, 1e9));
  gen->add_option("--temperature", gf.temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str()->check(apps::in_range(0, 100, "0 = greedy"));
  gen->add_option("--top-k", gf.top_k, "sample among the k most likely tokens (0 = all)")
      ->capture_default_str()->check(apps::in_range(0, 1 << 24, "0 = all"));
  gen->add_option("--seed", gf.seed, "sampling seed")->capture_default_str();
  gen->add_flag("--recompute", gf.recompute,
                "recompute the whole context for every token instead of keeping the attention's keys and values (slower; "
                "the same text)");
  apps::add_amp_flags(*gen, gf.amp);
  return apps::run_cli(app, argc, argv, "troupe-gpt", [&] {
    if (gen->parsed()) return generate(gf, *gen);
    if (tf.parallel.plan_only) return apps::plan_only(tf.parallel, tf.model, tf.batch, tf.seed, std::max(1, tf.run.micro_batches));
    tf.mesh_given = app.count("--dp") > 0 || tf.parallel.tp > 0 || tf.parallel.pp > 1;
    TROUPE_CHECK(tf.parallel.tp > 1 || (tf.parallel.strategy_load.empty() && tf.parallel.strategy_save.empty()), invalid_argument,
                 "--strategy-save and --strategy-load place a tensor-parallel run; give --tp too (or use them with --plan-only)");
    return train(tf, app);
  });
}
