// troupe-sr: trains the "sr-lite" super-resolution model (x2) on the actor runtime and upscales
// images with it.
//   troupe-sr [training flags]                          train (see --help)
//   troupe-sr infer --weights W in.png out.png          upscale one image
// GRAD_MODE=standard trains custom-relu models with the plain relu gradient; JIT_LEVEL=0 runs eagerly.
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/apps/cli.hpp"
#include "troupe/apps/image.hpp"
#include "troupe/apps/memory_budget.hpp"
#include "troupe/apps/parallel_flags.hpp"
#include "troupe/apps/resume.hpp"
#include "troupe/apps/sr_data.hpp"
#include "troupe/apps/training_run.hpp"
#include "troupe/graph/debug.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/models/checkpoint.hpp"
#include "troupe/models/sr_lite.hpp"
#include "troupe/models/weights.hpp"

using namespace troupe;
using graph::Var;

namespace {

struct TrainFlags {
  apps::SrDataOptions data;
  apps::RunFlags run;
  std::int64_t channels = 64, blocks = 4;
  std::string act = "custom-relu", load_weights;
  double lr = 1e-3;
  apps::ParallelFlags parallel;  // --dp, --comm-fusion-mb, --check-grads
  TrainFlags() { run.steps = 300; }
};

// What to do when a .safetensors file does not fit the model the flags describe.
constexpr const char* kWeightsAdvice = "give the --channels and --blocks it was saved with";

struct InferFlags {
  std::string weights, input, output;
  std::int64_t channels = 64, blocks = 4;
  apps::AmpFlags amp;
};

// Where a model's weights come from: the tensors, the file they were read from, and what to do
// when they do not fit.
struct WeightsSource {
  std::map<std::string, Tensor> tensors;
  std::string file, advice;
};

// The model of a checkpoint folder (its shape too; --channels and --blocks of `app` may only repeat
// it) or of a .safetensors file (shaped by the flags).
WeightsSource load_weights(const std::string& path, models::SrConfig& config, CLI::App& app) {
  if (std::filesystem::is_directory(path)) {
    models::Checkpoint c = models::load_checkpoint(path, "troupe-sr");
    apps::ResumeSettings settings(app, c.state);
    settings.take("--channels", "channels", config.channels);
    settings.take("--blocks", "blocks", config.blocks);
    return {std::move(c.model), c.folder + "/model.safetensors", "the checkpoint is damaged or from another model"};
  }
  return {models::read_weights(path, "--weights takes a checkpoint folder or a .safetensors file"), path, kWeightsAdvice};
}

// Mean held-out PSNR of the model's upscaling, on whole images, eagerly (any size).
double evaluate(models::SrLite& model, const apps::SrData& data) {
  graph::NoGradGuard no_grad;
  double total = 0;
  for (const auto& [lr, hr] : data.held_out()) total += apps::psnr(model(Var(lr)).tensor(), hr, model.config.upscale);
  return total / static_cast<double>(data.held_out().size());
}

// The checkpoint decides the model, the data and the batch; flags may only repeat them. Returns
// the model they describe, once it is known to fit in memory.
models::SrConfig settle(apps::TrainingRun& run, TrainFlags& f) {
  if (run.resumed()) {
    apps::ResumeSettings& settings = run.settings();
    settings.take("--channels", "channels", f.channels);
    settings.take("--blocks", "blocks", f.blocks);
    settings.take("--act", "act", f.act);
    settings.take("--data", "data", f.data.folder, /*is_path=*/true);
    settings.take("--seed", "seed", f.data.seed);
    // The global batch stays; a run of another layout splits it among its own replicas.
    if (run.resumed()->state.ints.count("global_batch"))
      settings.take_divided("--batch", "global_batch", f.parallel.dp, f.data.batch);
    else
      settings.take("--batch", "batch", f.data.batch);
    settings.take("--patch", "patch", f.data.patch);
  }
  models::SrConfig config;
  config.channels = f.channels;
  config.blocks = f.blocks;
  if (run.resumed())
    models::naming_file(run.state_file(), "holds an unknown activation", "the file is damaged or from another version",
                      [&] { config.activation = models::parse_activation(f.act); });
  else
    config.activation = models::parse_activation(f.act);
  config.upscale = f.data.upscale;
  char sizes[160];
  std::snprintf(sizes, sizeof sizes, "--patch %lld --batch %lld --channels %lld --blocks %lld",
                static_cast<long long>(f.data.patch), static_cast<long long>(f.data.batch),
                static_cast<long long>(f.channels), static_cast<long long>(f.blocks));
  apps::require_memory(apps::sr_training_bytes(config, f.data), sizes, "use a smaller --patch or --batch, or a smaller model");
  return config;
}

// The start-up lines about the model and the data (with the bicubic baseline).
std::vector<std::string> start_lines(const TrainFlags& f, const models::SrConfig& config, const apps::SrData& data,
                                     const models::SrLite& model) {
  char line[256], psnr[32];
  std::snprintf(line, sizeof line,
                "sr-lite x%lld, %lld parameters (%lld channels, %lld residual blocks, --act %s), batch %lld of %lldx%lld patches",
                static_cast<long long>(config.upscale), static_cast<long long>(model.parameter_count()),
                static_cast<long long>(config.channels), static_cast<long long>(config.blocks), f.act.c_str(),
                static_cast<long long>(f.data.batch), static_cast<long long>(f.data.patch), static_cast<long long>(f.data.patch));
  std::snprintf(psnr, sizeof psnr, "%.2f", data.bicubic_psnr());
  return {line, "data: " + data.source() + "; held-out bicubic PSNR " + psnr + " dB"};
}

// The run's settings: batch, Adam, the step's inputs, the GRAD_MODE note and the throughput unit.
apps::TrainingSetup setup(const TrainFlags& f, bool plain_gradient) {
  apps::TrainingSetup s;
  s.batch = f.data.batch;
  s.lr = f.lr;
  s.weight_decay = 0;  // Adam: AdamW without weight decay
  const graph::SymDim b = graph::SymDim::symbol("batch");
  const std::int64_t lo_side = f.data.patch / f.data.upscale;
  s.signature = {{"input", {b, 3, lo_side, lo_side}}, {"target", {b, 3, f.data.patch, f.data.patch}}};
  s.parallel = f.parallel;
  if (plain_gradient) s.grad_mode_note = " (custom-relu trains with the plain relu gradient)";
  s.weights_advice = kWeightsAdvice;
  s.items_per_step = static_cast<double>(f.data.batch);
  s.unit = "img/s";
  s.eval_name = "val_psnr";
  return s;
}

// troupe-sr's parts of the run; `data` and `model` are built by the run and live in train().
apps::TrainingParts parts(const TrainFlags& f, const models::SrConfig& config, std::optional<apps::SrData>& data,
                          std::optional<models::SrLite>& model) {
  apps::TrainingParts p;
  // With data parallelism every rank draws the batches of all ranks and keeps its own rows.
  p.load_data = [&](int ranks, std::int64_t batch) {
    apps::SrDataOptions all = f.data;
    all.batch = batch * ranks;
    data.emplace(all);
  };
  p.build_model = [&]() -> graph::Module& {
    Generator gen(f.data.seed);
    return model.emplace(config, gen);
  };
  p.data_position = [&] { return data->position(); };
  p.set_data_position = [&](std::uint64_t position) { data->set_position(position); };
  p.describe = [&] { return start_lines(f, config, *data, *model); };
  p.loss = [&](const std::vector<Var>& in) {
    return std::vector<Var>{graph::debug_print("loss", graph::mse_loss((*model)(in[0]), in[1]))};
  };
  p.next_batch = [&] {
    auto [lr, hr] = data->next();
    return std::vector<Tensor>{lr, hr};
  };
  p.evaluate = [&](const apps::ForwardLoss&) { return evaluate(*model, *data); };  // PSNR of whole images, eagerly
  p.store_settings = [&](models::CheckpointState& st) {
    st.ints["channels"] = f.channels;
    st.ints["blocks"] = f.blocks;
    st.ints["seed"] = static_cast<std::int64_t>(f.data.seed);
    st.ints["batch"] = f.data.batch;
    st.ints["global_batch"] = f.data.batch * f.parallel.dp;
    st.ints["patch"] = f.data.patch;
    st.strings["act"] = f.act;
    st.strings["data"] = f.data.folder;
  };
  p.summary_fields = [&](const apps::LoopSummary& s) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "\"train_loss\":%.6f,\"val_psnr\":%.3f,\"bicubic_psnr\":%.3f,\"ms_per_step\":%.2f,\"images_per_s\":%.2f",
                  s.train_loss, s.eval, data->bicubic_psnr(), s.ms_per_step, s.items_per_s);
    return std::string(buf);
  };
  return p;
}

int train(TrainFlags f, CLI::App& app) {
  apps::TrainingRun run(app, "troupe-sr", f.run, f.load_weights);
  models::SrConfig config = settle(run, f);
  const bool plain_gradient = run.mode() == apps::GradMode::standard && config.activation == models::Activation::custom_relu;
  if (plain_gradient) config.activation = models::Activation::relu;  // same forward, the plain gradient
  std::optional<apps::SrData> data;
  std::optional<models::SrLite> model;
  return run.train(setup(f, plain_gradient), parts(f, config, data, model));
}

int infer(const InferFlags& f, CLI::App& app) {
  models::SrConfig config;
  config.channels = f.channels;
  config.blocks = f.blocks;
  const WeightsSource weights = load_weights(f.weights, config, app);
  Generator gen(0);
  models::SrLite model(config, gen);
  models::load_weights_into(model, weights.tensors, weights.file, weights.advice);
  models::require_file(f.input, "give a PNG image to upscale");
  const Tensor image = apps::read_png(f.input);
  graph::NoGradGuard no_grad;
  const int level = graph::jit_level();
  const graph::AmpOptions amp = apps::resolve_amp(f.amp, level, "troupe-sr");
  // Through the graph passes of JIT_LEVEL (eager at 0), traced once for any image size.
  const graph::Jit upscale([&](const std::vector<Var>& in) { return std::vector<Var>{model(in[0])}; },
                           {{"image", {1, 3, graph::SymDim::symbol("height"), graph::SymDim::symbol("width")}}}, false,
                           level, amp);
  const Tensor out = upscale({image.unsqueeze(0)})[0];
  apps::write_png(f.output, out.slice(0, 0, 1).reshape({3, out.size(2), out.size(3)}));
  std::printf("troupe-sr: %s (%lldx%lld) -> %s (%lldx%lld)\n", f.input.c_str(), static_cast<long long>(image.size(2)),
              static_cast<long long>(image.size(1)), f.output.c_str(), static_cast<long long>(out.size(3)),
              static_cast<long long>(out.size(2)));
  // At JIT level 3 the call was recorded and planned: the planned peak next to the measured one.
  if (upscale.traced() && upscale.traced_function().plans_memory()) {
    std::printf("troupe-sr: memory: %s\n", upscale.traced_function().memory_report().describe().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"troupe-sr: train the sr-lite x2 super-resolution model on the actor runtime, or upscale an image"};
  TrainFlags tf;
  app.add_option("--data", tf.data.folder, "folder of PNG images (default: built-in procedural images)");
  app.add_option("--act", tf.act, "activation: relu or custom-relu (relu forward, leaky gradient)")->capture_default_str();
  app.add_option("--channels", tf.channels, "feature channels")->capture_default_str()->check(apps::in_range(1, 4096));
  app.add_option("--blocks", tf.blocks, "residual blocks")->capture_default_str()->check(apps::in_range(0, 1024));
  app.add_option("--patch", tf.data.patch, "high-resolution training patch side")
      ->capture_default_str()->check(apps::in_range(2, 1 << 20, "pixels"));
  app.add_option("--batch", tf.data.batch, "patches per step")->capture_default_str()->check(apps::in_range(1, 1 << 20));
  app.add_option("--held-out", tf.data.held_out, "procedural held-out images for PSNR")
      ->capture_default_str()->check(apps::in_range(1, 10000));
  app.add_option("--lr", tf.lr, "Adam learning rate")->capture_default_str()->check(apps::open_range(0, 10));
  app.add_option("--seed", tf.data.seed, "seed of the initial weights and of the data")->capture_default_str();
  app.add_option("--load-weights", tf.load_weights, "start from these weights (.safetensors, names in docs/APPS.md)");
  apps::add_data_parallel_flags(app, tf.parallel);
  apps::add_run_flags(app, tf.run);
  InferFlags inf;
  CLI::App* infer_cmd = app.add_subcommand("infer", "upscale one PNG image x2");
  infer_cmd->add_option("--weights", inf.weights, "a checkpoint folder (--save) or a .safetensors file")->required();
  infer_cmd->add_option("--channels", inf.channels, "feature channels of a .safetensors model")
      ->capture_default_str()->check(apps::in_range(1, 4096));
  infer_cmd->add_option("--blocks", inf.blocks, "residual blocks of a .safetensors model")
      ->capture_default_str()->check(apps::in_range(0, 1024));
  apps::add_amp_flags(*infer_cmd, inf.amp);
  infer_cmd->add_option("input", inf.input, "input PNG")->required();
  infer_cmd->add_option("output", inf.output, "output PNG")->required();
  return apps::run_cli(app, argc, argv, "troupe-sr", [&] { return infer_cmd->parsed() ? infer(inf, *infer_cmd) : train(tf, app); });
}
