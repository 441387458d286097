#include "troupe/apps/training_run.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <utility>

#include "troupe/apps/plan_only.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/layout.hpp"
#include "troupe/kernels/threading.hpp"
#include "troupe/models/weights.hpp"

namespace troupe::apps {

namespace {

// What the loop's hooks and the final line need once the model and the parallel training exist.
struct Session {
  const std::string& name;
  const RunFlags& flags;
  const TrainingSetup& setup;
  const TrainingParts& parts;
  graph::Module& model;
  actors::ParallelTraining& training;
  std::int64_t parameter_count = 0;  // the model's (its tensors are released between evaluations with --tp)
  /// Whether the ranks hold parts of the model or of the optimizer state, which they gather
  /// together for evaluation and checkpoints (compressed gradients' errors are reduced for them).
  bool split() const {
    return training.tensor_parallel() || training.pp() > 1 || training.zero() ||
           training.data_parallel().compression.kind != actors::GradCompression::Kind::none;
  }
};

// `path` of rank `rank`'s own file: "trace.json" -> "trace.rank1.json" (empty stays empty).
std::string rank_file(const std::string& path, int rank) {
  if (path.empty()) return path;
  const std::size_t dot = path.rfind('.'), slash = path.rfind('/');
  const bool extension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  const std::string tag = ".rank" + std::to_string(rank);
  return extension ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

// The loss forward only: on a forward-only program when there is one, otherwise eagerly.
ForwardLoss forward_loss(const Session& s, actors::Program* program) {
  return [&s, program](const std::vector<Tensor>& inputs) {
    if (program) return program->run(inputs).outputs[0].item();
    graph::NoGradGuard no_grad;
    return s.parts.loss(std::vector<graph::Var>(inputs.begin(), inputs.end()))[0].tensor().item();
  };
}

// The step's batch: with --grad-accum N, N of the app's batches. Each holds every replica's rows
// in replica order; the step gives replica r the r-th share of what it is given, so the batches
// are laid out replica by replica: replica r gets its rows of batch 1, then of batch 2, ...
std::vector<Tensor> next_step_batch(const Session& s) {
  const int n = s.flags.grad_accum, dp = s.training.dp();
  if (n == 1) return s.parts.next_batch();
  std::vector<std::vector<Tensor>> batches;
  for (int k = 0; k < n; ++k) batches.push_back(s.parts.next_batch());
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < batches[0].size(); ++i) {
    const std::int64_t share = batches[0][i].shape().at(0) / dp;
    std::vector<Tensor> parts;
    for (int r = 0; r < dp; ++r)
      for (int k = 0; k < n; ++k) parts.push_back(batches[static_cast<std::size_t>(k)][i].slice(0, r * share, (r + 1) * share));
    out.push_back(kernels::concat(parts, 0));
  }
  return out;
}

// One step on this rank's rows of the batch; with --check-grads, a warning line for every bucket
// whose reduced gradient norm differs between the ranks.
actors::StepReport one_step(Session& s, std::int64_t step_number) {
  actors::StepReport out = s.training.step(next_step_batch(s));
  for (const std::string& w : out.gradient_warnings)
    std::fprintf(stderr, "%s: warning: step %lld %s\n", s.name.c_str(), static_cast<long long>(step_number), w.c_str());
  if (!out.compression_choice.empty() && s.training.rank() == 0)
    std::printf("%s: step %lld: gradient compression %s\n", s.name.c_str(), static_cast<long long>(step_number),
                out.compression_choice.c_str());
  return out;
}

// The loop's hooks: the step, the app's evaluation and, on rank 0 with --save, the checkpoint.
LoopHooks loop_hooks(Session& s, const ForwardLoss& forward, std::int64_t& step_number) {
  LoopHooks hooks;
  hooks.step = [&s, &step_number] { return one_step(s, ++step_number); };
  hooks.evaluate = [&s, &forward] {
    s.training.gather_parameters();
    s.model.train(false);  // no dropout at evaluation (the eager steps then train again)
    const double score = s.parts.evaluate(forward);
    s.model.train(true);
    s.training.release_parameters();
    return score;
  };
  // The replicas hold the same model: rank 0 saves it, whole (with --tp, ZeRO-1 or compression,
  // gathered by every rank), so any layout can resume it.
  if (!s.flags.save.empty() && (s.training.rank() == 0 || s.split()))
    hooks.save = [&s](std::int64_t step) {
      s.training.gather_parameters();
      const std::map<std::string, Tensor> optimizer_state = s.training.optimizer_state();
      if (s.training.rank() != 0) {
        s.training.release_parameters();
        return false;
      }
      models::CheckpointState st;
      s.parts.store_settings(st);
      st.ints["step"] = step;
      st.ints["data_position"] = static_cast<std::int64_t>(s.parts.data_position());
      st.strings["app"] = s.name;
      st.strings["lr_schedule"] = s.flags.lr_schedule;
      st.ints["warmup_steps"] = s.flags.warmup_steps;
      st.ints["decay_steps"] = s.training.config().lr_schedule.decay_steps;
      st.strings["min_lr"] = exact_text(s.flags.min_lr);
      st.strings["lr"] = exact_text(s.setup.lr);
      st.ints["grad_accum"] = s.flags.grad_accum;
      if (const graph::GradScaler* scaler = s.training.loss_scaler())
        for (const auto& [key, value] : scaler->state_dict()) st.strings["loss_scaler." + key] = value;
      models::save_checkpoint(s.flags.save, step, s.model.state_dict(), optimizer_state, st);
      s.training.release_parameters();
      return true;
    };
  // Every rank votes on a save the clock calls for, saving or not.
  if (!s.flags.save.empty() && s.flags.save_every_min > 0)
    hooks.any_rank = [&s](bool mine) { return s.training.any_rank(mine); };
  return hooks;
}

// The final JSON line: the app's fields between the step count and the parameter count, and with
// several ranks how much of the gradient communication backward hid.
void print_summary(const Session& s, const LoopSummary& summary) {
  std::string dp_fields;
  const actors::ParallelTraining& t = s.training;
  if (t.size() > 1) {
    char buf[400];
    std::snprintf(buf, sizeof buf, ",\"dp\":%d,\"tp\":%d,\"pp\":%d,\"zero\":%d,\"rank\":%d,\"held_parameter_bytes\":%zu,"
                  "\"held_optimizer_bytes\":%zu,\"comm_ms\":%.2f,\"exposed_comm_ms\":%.2f,\"hidden_fraction\":%.3f,"
                  "\"comm_bytes_per_step\":%.0f",
                  t.dp(), t.tp(), t.pp(), t.zero() ? 1 : 0, t.rank(), t.held_parameter_bytes(), t.held_optimizer_bytes(),
                  summary.comm_ms, summary.exposed_comm_ms,
                  summary.comm_ms > 0 ? std::max(0.0, 1.0 - summary.exposed_comm_ms / summary.comm_ms) : 0.0,
                  summary.comm_bytes);
    dp_fields = buf;
  }
  // At JIT level 3 the steps ran in a planned arena: the planned peak next to the measured one.
  if (const auto memory = s.training.memory_report()) std::printf("%s: memory: %s\n", s.name.c_str(), memory->describe().c_str());
  const std::string fields = s.parts.summary_fields(summary);
  std::printf("{\"app\":\"%s\",\"steps\":%lld,%s,\"params\":%lld,\"peak_bytes\":%zu,\"step_peak_bytes\":%zu,"
              "\"skipped_steps\":%lld%s}\n",
              s.name.c_str(), static_cast<long long>(summary.steps), fields.c_str(),
              static_cast<long long>(s.parameter_count), cpu_allocator().stats().peak_bytes, summary.step_peak_bytes,
              static_cast<long long>(summary.skipped_steps), dp_fields.c_str());
}

// Runs the loop from `start_step` (evaluating on a forward-only program when the app asks for one)
// and prints the final line.
int run_loop(Session& s, const actors::ParallelConfig& config, std::int64_t start_step) {
  std::unique_ptr<actors::Program> forward_program;
  if (s.setup.forward_program && s.training.engine()) {
    actors::ProgramOptions options;
    options.micro_batches = config.micro_batches;
    s.model.train(false);  // the evaluation's graph has no dropout
    forward_program = s.training.engine()->compile(
        graph::trace(s.parts.loss, s.setup.signature).with_amp(config.amp).optimized(config.jit_level), options);
    s.model.train(true);
  }
  const ForwardLoss forward = forward_loss(s, forward_program.get());
  s.training.release_parameters();  // (the forward program reads the parameters when it runs, gathered then)
  cpu_allocator().reset_stats();  // peak_bytes: the training's peak, not the set-up's (a --tp rank's whole model)
  std::int64_t step_number = start_step;
  const LoopHooks hooks = loop_hooks(s, forward, step_number);
  LoopOptions lo = loop_options(s.flags);
  lo.start_step = start_step;
  if (s.training.rank() > 0) {  // rank 0 writes the run's files; a pipeline's stages each their trace
    lo.metrics_path = lo.report_path = "";
    lo.trace_path = s.training.pp() > 1 ? rank_file(lo.trace_path, s.training.rank()) : "";
  }
  lo.items_per_step = s.setup.items_per_step * static_cast<double>(s.training.replica_batch()) /
                      static_cast<double>(s.setup.batch);  // (a searched mesh splits the global batch; accumulation multiplies it)
  lo.unit = s.setup.unit;
  lo.eval_name = s.setup.eval_name;
  lo.app = s.name;
  print_summary(s, run_training_loop(lo, hooks));
  return 0;
}

}  // namespace

TrainingRun::TrainingRun(CLI::App& app, std::string name, RunFlags flags, std::string load_weights)
    : name_(std::move(name)),
      flags_(std::move(flags)),
      load_weights_(std::move(load_weights)),
      mode_(grad_mode()),
      jit_(graph::jit_level()) {
  TROUPE_CHECK(flags_.resume.empty() || load_weights_.empty(), invalid_argument,
               "--resume and --load-weights both give the starting weights; pass one of them");
  // A job troupe-launch started again after a rank failed (--max-restarts) continues from its last save.
  const char* restart = std::getenv("TROUPE_RESTART");
  if (restart && std::atoi(restart) > 0 && !flags_.save.empty() &&
      std::filesystem::exists(std::filesystem::path(flags_.save) / "latest")) {
    std::printf("%s: restart %d: resuming from the last checkpoint in '%s'\n", name_.c_str(), std::atoi(restart),
                flags_.save.c_str());
    flags_.resume = flags_.save;
    load_weights_.clear();
    restarted_ = true;
  }
  if (flags_.resume.empty()) return;
  resumed_ = models::load_checkpoint(flags_.resume, name_);
  settings_.emplace(app, resumed_->state);
}

int TrainingRun::train(const TrainingSetup& given, const TrainingParts& parts) {
  TrainingSetup setup = given;
  if (resumed_) resume_schedule(setup);
  std::shared_ptr<actors::Job> job = actors::Job::from_environment();
  const actors::ParallelConfig config = parallel_config(setup, *job);
  if (!flags_.save.empty() && job->rank() == 0) models::prepare_save_folder(flags_.save, flags_.resume);
  graph::Module& model = parts.build_model();
  const std::int64_t start_step = restore_weights(model, setup, parts);
  if (restarted_ && start_step >= flags_.steps) {  // a rank failed after the last save: the run is done
    std::printf("%s: the restarted run already reached step %lld; nothing is left to do\n", name_.c_str(),
                static_cast<long long>(start_step));
    return 0;
  }
  // Products run one per actor, side by side; the other kernels take the cores left idle, of this
  // rank's share of the machine.
  set_kernel_threads(1);
  set_parallel_cores(std::max(1, resolve_threads(flags_) / job->local_size()));
  kernels::AdamWParams hp;
  hp.lr = setup.lr;
  hp.weight_decay = setup.weight_decay;
  actors::TrainingProblem problem;
  problem.model = &model;
  problem.loss = parts.loss;
  problem.signature = setup.signature;
  problem.global_batch = (config.search ? setup.batch : setup.batch * config.dp) * config.accumulation;
  problem.optimizer = [hp](const std::vector<graph::Var>& parameters) {
    return std::make_shared<graph::AdamW>(parameters, hp);
  };
  problem.placement = setup.placement;
  problem.stages = parts.stages;
  // The data first, so that its errors come before the step is compiled; a searched mesh is known
  // only once the job has chosen it.
  if (!config.search) parts.load_data(config.dp, setup.batch);
  actors::ParallelTraining training(std::move(problem), config, job);
  if (config.search) parts.load_data(training.dp(), training.replica_batch());
  restore_state(training, setup, parts);
  announce(setup, parts, config, training, start_step);
  Session session{name_, flags_, setup, parts, model, training, model.parameter_count()};
  return run_loop(session, config, start_step);
}

actors::ParallelConfig TrainingRun::parallel_config(const TrainingSetup& setup, const actors::Job& job) const {
  const ParallelFlags& p = setup.parallel;
  actors::ParallelConfig c;
  c.search = setup.search_mesh && job.size() > 1;
  c.dp = p.dp;
  c.tp = std::max(1, p.tp);
  c.pp = p.pp;
  c.pp_layers = p.pp_layers;
  c.schedule = actors::parse_pipeline_schedule(p.pp_schedule);
  c.memory_budget = p.mem_per_rank;
  c.gflops = p.gflops;
  c.update_gbps = p.update_gbps;
  c.strategy_load = p.strategy_load;
  c.strategy_save = p.strategy_save;
  c.zero = p.zero;
  c.bucket_mb = p.comm_fusion_mb;
  c.grad_compression = actors::GradCompression::parse(p.grad_compression);
  c.check_gradients = p.check_grads;
  c.overlap = mode_ == GradMode::advanced;
  c.clip = flags_.clip;
  c.threads = resolve_threads(flags_);
  c.micro_batches = resolve_micro_batches(flags_, c.threads, setup.batch);
  c.jit_level = jit_;
  c.amp = resolve_amp(flags_.amp, jit_, name_);
  c.loss_scaling = resolve_loss_scaling(flags_, c.amp, jit_);
  c.measure_gradients = !metrics_path(flags_).empty();
  c.accumulation = flags_.grad_accum;
  c.gradients_mean = flags_.gradients_mean;
  c.lr_schedule = lr_schedule(flags_);
  c.seed = setup.seed;
  return c;
}

void TrainingRun::resume_schedule(TrainingSetup& setup) {
  ResumeSettings& s = *settings_;
  const models::CheckpointState& state = resumed_->state;
  // Checkpoints from before schedules and accumulation trained at a constant rate, one batch per
  // update; the defaults are taken silently, so that the resume line lists what matters.
  if (s.has("grad_accum") && (state.int_at("grad_accum") != 1 || s.given("--grad-accum"))) {
    std::int64_t accum = flags_.grad_accum;
    s.take("--grad-accum", "grad_accum", accum);
    flags_.grad_accum = static_cast<int>(accum);
  }
  // A run saved at a constant rate continues with whatever schedule the flags give, as a new --lr is honoured.
  if (!s.has("lr_schedule") || (state.string_at("lr_schedule") == "constant" && state.int_at("warmup_steps") == 0)) return;
  s.take("--lr-schedule", "lr_schedule", flags_.lr_schedule);
  s.take("--warmup-steps", "warmup_steps", flags_.warmup_steps);
  s.take("--decay-steps", "decay_steps", flags_.decay_steps);
  s.take("--min-lr", "min_lr", flags_.min_lr);
  // The schedule's peak is the run's --lr, which the optimizer state (the last step's rate) does not hold.
  if (flags_.lr_schedule != "constant" || flags_.warmup_steps > 0) s.settle_peak_lr("lr", setup.lr);
}

std::int64_t TrainingRun::restore_weights(graph::Module& model, const TrainingSetup& setup, const TrainingParts& parts) {
  if (resumed_) {
    models::load_weights_into(model, resumed_->model, resumed_->folder + "/model.safetensors",
                              "the checkpoint is damaged or from another model");
    return resumed_->state.int_at("step");
  }
  if (!load_weights_.empty()) {
    const auto weights = models::read_weights(load_weights_, "--load-weights takes a .safetensors file");
    models::load_weights_into(model, parts.weight_names ? parts.weight_names(weights) : weights, load_weights_,
                              setup.weights_advice);
  }
  return 0;
}

void TrainingRun::restore_state(actors::ParallelTraining& training, const TrainingSetup& setup, const TrainingParts& parts) {
  if (!resumed_) return;
  training.set_steps(resumed_->state.int_at("step"));
  parts.set_data_position(static_cast<std::uint64_t>(resumed_->state.int_at("data_position")));
  std::map<std::string, Tensor> optimizer_state = resumed_->optimizer;
  // A schedule sets every step's rate from its peak (resume_schedule); otherwise the state's rates stand.
  if (!training.config().lr_schedule.active()) settings_->settle_lr(optimizer_state, setup.lr);
  models::naming_file(resumed_->folder + "/optimizer.safetensors", "does not fit the optimizer",
                      "the checkpoint is damaged or from another model",
                      [&] { training.load_optimizer_state(optimizer_state); });
  graph::GradScaler* scaler = training.loss_scaler();
  if (!scaler) return;
  // A run saved without loss scaling has no scaler state: the scaler starts from its defaults.
  std::map<std::string, std::string> state;
  for (const auto& [key, value] : resumed_->state.strings)
    if (key.rfind("loss_scaler.", 0) == 0) state[key.substr(12)] = value;
  if (state.empty()) return;
  try {
    scaler->load_state_dict(state);
  } catch (const Error& e) {
    throw Error(e.kind(), "'" + resumed_->state.source + "': " + e.message() + "; the checkpoint is damaged");
  }
}

void TrainingRun::announce(const TrainingSetup& setup, const TrainingParts& parts, const actors::ParallelConfig& step,
                           const actors::ParallelTraining& training, std::int64_t start_step) const {
  const char* name = name_.c_str();
  if (const auto& choice = training.mesh_choice(); choice && training.rank() == 0) {
    std::printf("%s: planning %d ranks (no --dp, no --tp): %.1f GFLOP/s and update %.1f GB/s measured; links", name,
                training.size(), choice->cost.gflops, choice->cost.update_gbps);
    for (const auto& [mesh, links] : choice->cost.mesh_links)
      for (const auto& [axis, link] : links)
        std::printf(" %s %s %.3f GB/s %.0f us;", mesh.c_str(), axis.c_str(), link.gbytes_per_s, link.latency_us);
    std::printf("\n");
    for (const plan::MeshCandidate& c : choice->candidates) std::printf("%s: %s\n", name, describe_candidate(c).c_str());
    std::printf("%s: planner chose dp=%d x tp=%d%s\n", name, training.dp(), training.tp(),
                training.pp() > 1 ? (" x pp=" + std::to_string(training.pp())).c_str() : "");
  }
  for (const std::string& line : parts.describe()) std::printf("%s: %s\n", name, line.c_str());
  const std::string resuming = resumed_ ? ", resuming at step " + std::to_string(start_step) : "";
  std::printf("%s: GRAD_MODE=%s%s, JIT_LEVEL=%d (%s), %d threads, %d micro-batches%s\n", name, to_string(mode_),
              setup.grad_mode_note.c_str(), jit_, jit_ == 0 ? "eager" : "actor graph", step.threads,
              jit_ == 0 ? 1 : training.config().micro_batches, resuming.c_str());
  const char* scaling = step.loss_scaling ? ", dynamic loss scaling from 2^16" : "";
  const char* low = dtype_name(step.amp.dtype);
  const std::string level = std::string(to_string(step.amp.level)) + (flags_.amp.level == "auto" ? " (--amp auto)" : "");
  if (step.amp.level == graph::AmpLevel::O0)
    std::printf("%s: mixed precision: %s, f32%s%s\n", name, level.c_str(), scaling,
                flags_.amp.level == "auto" ? (jit_ == 0 ? "; JIT_LEVEL=0 runs eagerly, in f32" : "; this CPU has no native low precision")
                                           : "");
  else if (step.amp.level == graph::AmpLevel::O1)
    std::printf("%s: mixed precision: %s, matrix products and convolutions in %s on %s, the rest in f32%s\n", name,
                level.c_str(), low, kernels::cpu_isa(), scaling);
  else if (step.amp.level == graph::AmpLevel::O2)
    std::printf("%s: mixed precision: %s, activations in %s on %s, losses, softmax and normalisation in f32, f32 "
                "master weights%s%s\n", name, level.c_str(), low, kernels::cpu_isa(), scaling,
                flags_.amp.level == "auto" ? "; --amp O0 for f32" : "");
  else
    std::printf("%s: mixed precision: %s, every op in %s on %s (statistics and the loss in f32), f32 master weights, "
                "loss scale 1\n", name, level.c_str(), low, kernels::cpu_isa());
  if (resumed_) std::printf("%s: resuming '%s'; %s\n", name, flags_.resume.c_str(), settings_->summary().c_str());
  if (const graph::LrSchedule& lr = step.lr_schedule; lr.active())
    std::printf("%s: learning rate: warm-up over %lld steps to %g, then %s decay to %g at step %lld (next step's rate %g)\n",
                name, static_cast<long long>(lr.warmup_steps), setup.lr, graph::lr_decay_name(lr.decay),
                lr.decay == graph::LrDecay::constant ? setup.lr : lr.min_lr,
                static_cast<long long>(lr.decay == graph::LrDecay::constant ? lr.warmup_steps : lr.decay_steps),
                training.next_lr());
  if (step.accumulation > 1)
    std::printf("%s: gradient accumulation: %d batches of %lld rows per update on each replica\n", name,
                step.accumulation, static_cast<long long>(training.replica_batch() / step.accumulation));
  if (training.dp() > 1) {
    const actors::DataParallel& dp = training.data_parallel();
    char buckets[160];
    if (step.bucket_mb > 0)
      std::snprintf(buckets, sizeof buckets, "fusion %g MiB", dp.fusion_mb);
    else
      std::snprintf(buckets, sizeof buckets, "buckets of %.2f MiB, the first %.2f MiB (the link measured %.3f GB/s, %.0f us)",
                    dp.fusion_mb, dp.first_bucket_mb, training.link().gbytes_per_s, training.link().latency_us);
    std::printf("%s: data parallel: replica %d of %d (%s), per-replica batch %lld, global batch %lld, %s%s\n", name,
                training.dp_rank(), training.dp(), training.source().c_str(),
                static_cast<long long>(training.replica_batch()),
                static_cast<long long>(training.replica_batch() * training.dp()), buckets,
                dp.zero ? "; ZeRO-1: buckets reduce-scattered, each replica keeping its slice of the "
                          "optimizer state, parameters all-gathered"
                : dp.compression.kind != actors::GradCompression::Kind::none
                    ? ("; gradients compressed: " + dp.compression.str()).c_str()
                    : "");
  }
  if (const actors::TensorParallelStep* tp = training.tensor_parallel()) {
    int all_reduces = 0, others = 0;
    for (const graph::Node& n : tp->local().graph().nodes()) {
      all_reduces += n.op == "all_reduce";
      others += n.op == "all_gather" || n.op == "reduce_scatter";
    }
    std::printf("%s: tensor parallel: shard %d of %d (rank %d of %d), plan %s: %d all-reduces and %d other collectives "
                "per micro-batch, %zu of %zu parameters split; the passes of JIT_LEVEL after the split\n",
                name, training.tp_rank(), training.tp(), training.rank(), training.size(), tp->plan().mesh.str().c_str(), all_reduces,
                others, tp->local().parameters().size() - tp->replicated().size(), tp->local().parameters().size());
  }
  if (training.pp() > 1) {
    const std::vector<int> layers = training.stage_layers();
    const int stage = training.pp_rank();
    int first = 0;
    for (int s = 0; s < stage; ++s) first += layers[static_cast<std::size_t>(s)];
    std::string split;
    for (int n : layers) split += (split.empty() ? "" : ",") + std::to_string(n);
    std::printf("%s: pipeline: stage %d of %d (rank %d of %d), layers %d-%d of the split %s, schedule %s, %d micro-batches\n",
                name, stage, training.pp(), training.rank(), training.size(), first,
                first + layers[static_cast<std::size_t>(stage)] - 1, split.c_str(),
                actors::schedule_name(training.config().schedule).c_str(), training.config().micro_batches);
  }
}

}  // namespace troupe::apps
