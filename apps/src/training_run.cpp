#include "troupe/apps/training_run.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "troupe/graph/optim.hpp"
#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/threading.hpp"
#include "troupe/models/weights.hpp"

namespace troupe::apps {

namespace {

// What the loop's hooks and the final line need once the model and the step exist.
struct Session {
  const std::string& name;
  const RunFlags& flags;
  const TrainingSetup& setup;
  const TrainingParts& parts;
  ParallelJob* job;  // null: the app trains in one process only
  graph::Module& model;
  graph::Optimizer& optimizer;  // over the model's parameters (with --tp, what checkpoints save)
  TrainStep& step;
  std::shared_ptr<actors::TensorParallelStep> sharded;  // with --tp: this rank's step, whose shards train
  std::shared_ptr<graph::Optimizer> shard_optimizer;     // with --tp: the optimizer of the shards
  int rank() const { return job ? job->rank() : 0; }
  int ranks() const { return job ? job->size() : 1; }
  int replica() const { return job ? job->dp_rank() : 0; }
  int replicas() const { return job ? job->dp_size() : 1; }
  std::int64_t parameter_count = 0;  // the model's (its tensors are released between evaluations with --tp)
  /// Whether the ranks hold parts of the model or of the optimizer state, which they gather
  /// together for evaluation and checkpoints.
  bool split() const { return sharded || step.zero_state(); }
  /// The model's parameters as the last step left them, for evaluation and checkpoints: written by
  /// ZeRO-1's all-gather, and with --tp made whole from the tp group's shards (a collective: every
  /// rank calls it at the same point); release_model() lets them go again, so that a rank holds
  /// only its shards while it trains.
  void gather_model() {
    step.settle();
    if (!sharded) return;
    std::map<std::string, graph::Var> params;
    for (const auto& [name, p] : model.named_parameters()) params[name] = p;
    for (const auto& [name, whole] : sharded->gather(sharded->parameter_shards())) params.at(name).set_value(whole);
  }
  void release_model() {
    if (sharded)
      for (const auto& [name, p] : model.named_parameters()) p.set_value(Tensor());
  }
  /// The whole optimizer state, as a single process's optimizer would hold it: with ZeRO-1 from the
  /// dp replicas' slices, with --tp from the tp group's shards (collectives, like gather_model()).
  std::map<std::string, Tensor> optimizer_state() {
    const graph::Optimizer& stepped = sharded ? *shard_optimizer : optimizer;  // the program's optimizer
    std::map<std::string, Tensor> state = step.zero_state() ? step.zero_state()->gather() : stepped.state_dict();
    return sharded ? sharded->gather(state) : state;
  }
};

// The loss forward only: on a forward-only program when there is one, otherwise eagerly.
ForwardLoss forward_loss(const Session& s, actors::Program* program) {
  return [&s, program](const std::vector<Tensor>& inputs) {
    if (program) return program->run(inputs).outputs[0].item();
    graph::NoGradGuard no_grad;
    return s.parts.loss(std::vector<graph::Var>(inputs.begin(), inputs.end()))[0].tensor().item();
  };
}

// One step on this rank's rows of the batch; with --check-grads, a warning line for every bucket
// whose reduced gradient norm differs between the ranks.
StepOutcome one_step(Session& s, std::int64_t step_number) {
  std::vector<Tensor> batch = s.parts.next_batch();
  if (s.replicas() > 1) {
    // Every rank draws the global batch and keeps its replica's rows, so N replicas see what one
    // process at N times the batch would.
    const std::int64_t r = s.replica(), rows = s.setup.batch;
    for (Tensor& t : batch) t = t.slice(0, r * rows, (r + 1) * rows).contiguous();
  }
  StepOutcome out = s.step(batch);
  if (s.setup.data_parallel && s.setup.data_parallel->check_grads)
    for (const std::string& w : s.job->compare_bucket_norms(step_number, out.bucket_squared_norms))
      std::fprintf(stderr, "%s: %s\n", s.name.c_str(), w.c_str());
  return out;
}

// The loop's hooks: the step, the app's evaluation and, on rank 0 with --save, the checkpoint.
LoopHooks loop_hooks(Session& s, const ForwardLoss& forward, std::int64_t& step_number) {
  LoopHooks hooks;
  hooks.step = [&s, &step_number] { return one_step(s, ++step_number); };
  hooks.evaluate = [&s, &forward] {
    s.gather_model();
    const double score = s.parts.evaluate(forward);
    s.release_model();
    return score;
  };
  // The replicas hold the same model: rank 0 saves it, whole (with --tp or ZeRO-1, gathered by
  // every rank), so any layout can resume it.
  if (!s.flags.save.empty() && (s.rank() == 0 || s.split()))
    hooks.save = [&s](std::int64_t step) {
      s.gather_model();
      const std::map<std::string, Tensor> optimizer_state = s.optimizer_state();
      if (s.rank() != 0) {
        s.release_model();
        return false;
      }
      models::CheckpointState st;
      s.parts.store_settings(st);
      st.ints["step"] = step;
      st.ints["data_position"] = static_cast<std::int64_t>(s.parts.data_position());
      st.strings["app"] = s.name;
      if (const graph::GradScaler* scaler = s.step.loss_scaler())
        for (const auto& [key, value] : scaler->state_dict()) st.strings["loss_scaler." + key] = value;
      models::save_checkpoint(s.flags.save, step, s.model.state_dict(), optimizer_state, st);
      s.release_model();
      return true;
    };
  return hooks;
}

// The final JSON line: the app's fields between the step count and the parameter count, and with
// several ranks how much of the gradient communication backward hid.
void print_summary(const Session& s, const LoopSummary& summary) {
  std::string dp_fields;
  if (s.ranks() > 1) {
    // What this rank holds of the parameters (its shards) and of the optimizer state (its slices).
    const auto bytes = [](const std::map<std::string, Tensor>& ts) {
      std::size_t n = 0;
      for (const auto& [name, t] : ts) n += t.nbytes();
      return n;
    };
    std::map<std::string, Tensor> params;
    for (const auto& [name, p] : s.model.named_parameters()) params[name] = p.tensor();
    const std::size_t held_params = bytes(s.sharded ? s.sharded->parameter_shards() : params);
    const std::size_t held_state = bytes(s.step.zero_state() ? s.step.zero_state()->kept()
                                                             : (s.sharded ? *s.shard_optimizer : s.optimizer).state_dict());
    char buf[320];
    std::snprintf(buf, sizeof buf, ",\"dp\":%d,\"tp\":%d,\"zero\":%d,\"rank\":%d,\"held_parameter_bytes\":%zu,"
                  "\"held_optimizer_bytes\":%zu,\"comm_ms\":%.2f,\"exposed_comm_ms\":%.2f,\"hidden_fraction\":%.3f",
                  s.replicas(), s.job->tp_size(), s.step.zero_state() ? 1 : 0, s.rank(), held_params, held_state,
                  summary.comm_ms, summary.exposed_comm_ms,
                  summary.comm_ms > 0 ? std::max(0.0, 1.0 - summary.exposed_comm_ms / summary.comm_ms) : 0.0);
    dp_fields = buf;
  }
  // At JIT level 3 the steps ran in a planned arena: the planned peak next to the measured one.
  if (const auto memory = s.step.memory_report()) std::printf("%s: memory: %s\n", s.name.c_str(), memory->describe().c_str());
  const std::string fields = s.parts.summary_fields(summary);
  std::printf("{\"app\":\"%s\",\"steps\":%lld,%s,\"params\":%lld,\"peak_bytes\":%zu,\"step_peak_bytes\":%zu,"
              "\"skipped_steps\":%lld%s}\n",
              s.name.c_str(), static_cast<long long>(summary.steps), fields.c_str(),
              static_cast<long long>(s.parameter_count), cpu_allocator().stats().peak_bytes, summary.step_peak_bytes,
              static_cast<long long>(summary.skipped_steps), dp_fields.c_str());
}

// Runs the loop from `start_step` (evaluating on a forward-only program when the app asks for one)
// and prints the final line.
int run_loop(Session& s, const TrainStepOptions& step_setup, std::int64_t start_step) {
  std::unique_ptr<actors::Program> forward_program;
  if (s.setup.forward_program && s.step.engine()) {
    actors::ProgramOptions options;
    options.micro_batches = step_setup.micro_batches;
    forward_program = s.step.engine()->compile(
        graph::trace(s.parts.loss, s.setup.signature).with_amp(step_setup.amp).optimized(step_setup.jit_level), options);
  }
  const ForwardLoss forward = forward_loss(s, forward_program.get());
  s.release_model();  // (the forward program reads the parameters when it runs, gathered then)
  cpu_allocator().reset_stats();  // peak_bytes: the training's peak, not the set-up's (a --tp rank's whole model)
  std::int64_t step_number = start_step;
  const LoopHooks hooks = loop_hooks(s, forward, step_number);
  LoopOptions lo = loop_options(s.flags);
  lo.start_step = start_step;
  if (s.rank() > 0) lo.metrics_path = lo.trace_path = "";  // rank 0 writes the run's files
  lo.items_per_step = s.setup.items_per_step;
  lo.unit = s.setup.unit;
  lo.eval_name = s.setup.eval_name;
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
  if (flags_.resume.empty()) return;
  resumed_ = models::load_checkpoint(flags_.resume, name_);
  settings_.emplace(app, resumed_->state);
}

int TrainingRun::train(const TrainingSetup& given, const TrainingParts& parts) {
  TrainingSetup setup = given;
  std::optional<ParallelJob> job;
  const bool searched = setup.search && setup.data_parallel && setup.data_parallel->ranks == 1 && setup.tensor_parallel == 1 &&
                        ParallelJob::world_size() > 1;
  graph::Module* built = nullptr;  // a searched mesh is planned for the model's step, so it comes first
  if (searched) {
    built = &parts.build_model();
    job.emplace(join_searched(setup, parts));
  }
  const int replicas = setup.data_parallel ? setup.data_parallel->ranks : 1;
  TROUPE_CHECK(!setup.zero || replicas > 1, invalid_argument, "--zero 1 splits the optimizer state among the "
               "data-parallel replicas, and --dp 1 has one; use --dp 2 or more, or drop --zero");
  TROUPE_CHECK(!setup.zero || (jit_ > 0 && mode_ == GradMode::advanced), invalid_argument, "--zero 1 runs on the actor "
               "runtime's overlapped gradient path; unset JIT_LEVEL=0 and GRAD_MODE=standard");
  if (setup.tensor_parallel > 1) check_tensor_parallel(setup);  // before joining: every rank refuses alike, at once
  if (!job && (setup.data_parallel || setup.tensor_parallel > 1)) job.emplace(replicas, setup.tensor_parallel, setup.zero);
  if (!flags_.save.empty() && (!job || job->rank() == 0)) models::prepare_save_folder(flags_.save, flags_.resume);
  parts.load_data(job ? job->dp_size() : 1, setup.batch);
  graph::Module& model = built ? *built : parts.build_model();
  kernels::AdamWParams hp;
  hp.lr = setup.lr;
  hp.weight_decay = setup.weight_decay;
  auto optimizer = std::make_shared<graph::AdamW>(model.parameters(), hp);
  const std::int64_t start_step = restore(model, *optimizer, setup, parts);

  TrainStepOptions step_setup = step_options(flags_, setup.batch);
  step_setup.mode = mode_;
  step_setup.jit_level = jit_;
  step_setup.amp = resolve_amp(flags_.amp, jit_, name_);
  step_setup.loss_scaling = resolve_loss_scaling(flags_, step_setup.amp, jit_);
  step_setup.measure_gradients = !flags_.metrics.empty();
  set_kernel_threads(1);  // parallelism comes from actors running concurrently, not from inside a GEMM
  if (job && setup.data_parallel) step_setup.data_parallel = job->options(setup.data_parallel->comm_fusion_mb);
  const std::shared_ptr<graph::Optimizer> shards =
      setup.tensor_parallel > 1 ? shard_step(setup, parts, *job, *optimizer, step_setup) : nullptr;
  announce(setup, parts, step_setup, start_step, job ? &*job : nullptr);
  TrainStep step(parts.loss, setup.signature, model, shards ? shards : optimizer, step_setup);
  restore_loss_scaler(step);
  // ZeRO-1: each rank takes its slices of the (restored, or fresh) optimizer state.
  if (actors::ZeroState* zero = step.zero_state()) zero->load((shards ? shards : optimizer)->state_dict());
  Session session{name_, flags_, setup, parts, job ? &*job : nullptr, model, *optimizer, step,
                  step_setup.tensor_parallel.step, shards, model.parameter_count()};
  return run_loop(session, step_setup, start_step);
}

std::optional<Error> TrainingRun::tensor_parallel_refusal(const TrainingSetup& setup, int tp) const {
  using detail::str_cat;
  if (jit_ <= 0)
    return Error(ErrorKind::invalid_argument, str_cat("--tp ", tp, " shards the traced step, and JIT_LEVEL=0 runs eagerly; "
                                                      "use JIT_LEVEL=1 or more"));
  if (flags_.loss_scale == "dynamic")
    return Error(ErrorKind::unsupported, str_cat("--tp ", tp, " trains without loss scaling so far; use --loss-scale off"));
  if (!setup.plan) return Error(ErrorKind::invalid_argument, str_cat(name_, " has no plan for --tp"));
  return std::nullopt;
}

void TrainingRun::check_tensor_parallel(const TrainingSetup& setup) const {
  if (const std::optional<Error> e = tensor_parallel_refusal(setup, setup.tensor_parallel)) throw *e;
}

ParallelJob TrainingRun::join_searched(TrainingSetup& setup, const TrainingParts& parts) const {
  const graph::TracedFunction step = graph::trace(parts.loss, setup.signature).with_gradients();
  const bool tensor_parallel = !tensor_parallel_refusal(setup, 2).has_value();
  ParallelJob job([&](transport::Communicator& world, const plan::GroupMaker& group) {
    return setup.search(step, world, group, tensor_parallel);
  }, setup.zero);
  const std::int64_t global = setup.batch;
  TROUPE_CHECK(global % job.dp_size() == 0, invalid_argument, "the planner chose dp=", job.dp_size(), ", which does not split the ",
               "global batch of ", global, "; give --dp and --tp");
  setup.batch = global / job.dp_size();
  setup.items_per_step *= static_cast<double>(setup.batch) / static_cast<double>(global);
  setup.data_parallel->ranks = job.dp_size();
  setup.tensor_parallel = job.tp_size();
  return job;
}

std::shared_ptr<graph::Optimizer> TrainingRun::shard_step(const TrainingSetup& setup, const TrainingParts& parts,
                                                          ParallelJob& job, const graph::Optimizer& whole,
                                                          TrainStepOptions& step) const {
  step.loss_scaling = false;  // (check_tensor_parallel refused it)
  // Mixed precision's casts are ops like the others: they follow their input's placement, and the
  // collectives sum low-precision values in f32.
  const graph::TracedFunction traced = graph::trace(parts.loss, setup.signature).with_amp(step.amp).with_gradients();
  step.tensor_parallel.step = std::make_shared<actors::TensorParallelStep>(traced, setup.plan(traced, job), job.tensor_parallel());
  step.tensor_parallel.norms = job.tensor_parallel_norms();
  kernels::AdamWParams hp;
  hp.lr = setup.lr;
  hp.weight_decay = setup.weight_decay;
  auto shards = std::make_shared<graph::AdamW>(step.tensor_parallel.step->trained(), hp);
  // A resumed run's whole optimizer state, as this rank's shards (with the learning rate it settled).
  shards->load_state_dict(step.tensor_parallel.step->shard(whole.state_dict()));
  return shards;
}

std::int64_t TrainingRun::restore(graph::Module& model, graph::Optimizer& optimizer, const TrainingSetup& setup,
                                  const TrainingParts& parts) {
  if (resumed_) {
    models::load_weights_into(model, resumed_->model, resumed_->folder + "/model.safetensors",
                      "the checkpoint is damaged or from another model");
    models::load_optimizer_state(optimizer, resumed_->optimizer, resumed_->folder + "/optimizer.safetensors");
    settings_->settle_lr(optimizer, setup.lr);
    const std::int64_t step = resumed_->state.int_at("step");
    parts.set_data_position(static_cast<std::uint64_t>(resumed_->state.int_at("data_position")));
    return step;
  }
  if (!load_weights_.empty()) {
    const auto weights = models::read_weights(load_weights_, "--load-weights takes a .safetensors file");
    models::load_weights_into(model, parts.weight_names ? parts.weight_names(weights) : weights, load_weights_,
                      setup.weights_advice);
  }
  return 0;
}

void TrainingRun::restore_loss_scaler(TrainStep& step) const {
  graph::GradScaler* scaler = step.loss_scaler();
  if (!resumed_ || !scaler) return;
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

void TrainingRun::announce(const TrainingSetup& setup, const TrainingParts& parts, const TrainStepOptions& step,
                           std::int64_t start_step, const ParallelJob* job) const {
  const char* name = name_.c_str();
  for (const std::string& line : parts.describe()) std::printf("%s: %s\n", name, line.c_str());
  const std::string resuming = resumed_ ? ", resuming at step " + std::to_string(start_step) : "";
  std::printf("%s: GRAD_MODE=%s%s, JIT_LEVEL=%d (%s), %d threads, %d micro-batches%s\n", name, to_string(mode_),
              setup.grad_mode_note.c_str(), jit_, jit_ == 0 ? "eager" : "actor graph", step.threads,
              jit_ == 0 ? 1 : step.micro_batches, resuming.c_str());
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
  if (job && job->dp_size() > 1) {
    char buckets[160];
    if (setup.data_parallel->comm_fusion_mb > 0)
      std::snprintf(buckets, sizeof buckets, "fusion %g MiB", step.data_parallel.fusion_mb);
    else
      std::snprintf(buckets, sizeof buckets, "buckets of %.2f MiB, the first %.2f MiB (the link measured %.3f GB/s, %.0f us)",
                    step.data_parallel.fusion_mb, step.data_parallel.first_bucket_mb, job->link().gbytes_per_s,
                    job->link().latency_us);
    std::printf("%s: data parallel: replica %d of %d (%s), per-replica batch %lld, global batch %lld, %s%s\n",
                name, job->dp_rank(), job->dp_size(), job->source().c_str(), static_cast<long long>(setup.batch),
                static_cast<long long>(setup.batch * job->dp_size()), buckets,
                step.data_parallel.zero ? "; ZeRO-1: buckets reduce-scattered, each replica keeping its slice of the "
                                          "optimizer state, parameters all-gathered"
                                        : "");
  }
  if (const auto& tp = step.tensor_parallel.step) {
    int all_reduces = 0, others = 0;
    for (const graph::Node& n : tp->local().graph().nodes()) {
      all_reduces += n.op == "all_reduce";
      others += n.op == "all_gather" || n.op == "reduce_scatter";
    }
    std::printf("%s: tensor parallel: shard %d of %d (rank %d of %d), plan %s: %d all-reduces and %d other collectives "
                "per micro-batch, %zu of %zu parameters split; the passes of JIT_LEVEL after the split\n",
                name, job->tp_rank(), job->tp_size(), job->rank(), job->size(), tp->plan().mesh.str().c_str(), all_reduces,
                others, tp->local().parameters().size() - tp->replicated().size(), tp->local().parameters().size());
  }
}

}  // namespace troupe::apps
