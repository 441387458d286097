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
  DataParallelJob* job;  // null: the app trains in one process only
  graph::Module& model;
  graph::Optimizer& optimizer;
  TrainStep& step;
  int rank() const { return job ? job->rank() : 0; }
  int ranks() const { return job ? job->size() : 1; }
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
  if (s.ranks() > 1) {
    // Every rank draws the global batch and keeps its rows, so N ranks see what one process at N
    // times the batch would.
    const std::int64_t r = s.rank(), rows = s.setup.batch;
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
  hooks.evaluate = [&s, &forward] { return s.parts.evaluate(forward); };
  if (!s.flags.save.empty() && s.rank() == 0)  // the ranks hold the same model: rank 0 saves it
    hooks.save = [&s](std::int64_t step) {
      models::CheckpointState st;
      s.parts.store_settings(st);
      st.ints["step"] = step;
      st.ints["data_position"] = static_cast<std::int64_t>(s.parts.data_position());
      st.strings["app"] = s.name;
      if (const graph::GradScaler* scaler = s.step.loss_scaler())
        for (const auto& [key, value] : scaler->state_dict()) st.strings["loss_scaler." + key] = value;
      models::save_checkpoint(s.flags.save, step, s.model.state_dict(), s.optimizer.state_dict(), st);
    };
  return hooks;
}

// The final JSON line: the app's fields between the step count and the parameter count, and with
// several ranks how much of the gradient communication backward hid.
void print_summary(const Session& s, const LoopSummary& summary) {
  std::string dp_fields;
  if (s.ranks() > 1) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ",\"dp\":%d,\"rank\":%d,\"comm_ms\":%.2f,\"exposed_comm_ms\":%.2f,\"hidden_fraction\":%.3f",
                  s.ranks(), s.rank(), summary.comm_ms, summary.exposed_comm_ms,
                  summary.comm_ms > 0 ? std::max(0.0, 1.0 - summary.exposed_comm_ms / summary.comm_ms) : 0.0);
    dp_fields = buf;
  }
  // At JIT level 3 the steps ran in a planned arena: the planned peak next to the measured one.
  if (const auto memory = s.step.memory_report()) std::printf("%s: memory: %s\n", s.name.c_str(), memory->describe().c_str());
  const std::string fields = s.parts.summary_fields(summary);
  std::printf("{\"app\":\"%s\",\"steps\":%lld,%s,\"params\":%lld,\"peak_bytes\":%zu,\"skipped_steps\":%lld%s}\n",
              s.name.c_str(), static_cast<long long>(summary.steps), fields.c_str(),
              static_cast<long long>(s.model.parameter_count()), cpu_allocator().stats().peak_bytes,
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

int TrainingRun::train(const TrainingSetup& setup, const TrainingParts& parts) {
  std::optional<DataParallelJob> job;
  if (setup.data_parallel) job.emplace(setup.data_parallel->ranks);
  if (!flags_.save.empty() && (!job || job->rank() == 0)) models::prepare_save_folder(flags_.save, flags_.resume);
  parts.load_data(job ? job->size() : 1);
  graph::Module& model = parts.build_model();
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
  announce(setup, parts, step_setup, start_step, job ? &*job : nullptr);
  if (job) step_setup.data_parallel = job->options(setup.data_parallel->comm_fusion_mb);
  TrainStep step(parts.loss, setup.signature, model, optimizer, step_setup);
  restore_loss_scaler(step);
  Session session{name_, flags_, setup, parts, job ? &*job : nullptr, model, *optimizer, step};
  return run_loop(session, step_setup, start_step);
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
                           std::int64_t start_step, const DataParallelJob* job) const {
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
                flags_.amp.level == "auto" ? (jit_ == 0 ? "; JIT_LEVEL=0 runs eagerly, in f32"
                                                        : "; this CPU has no native low precision")
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
  if (job && job->size() > 1)
    std::printf("%s: data parallel: rank %d of %d (%s), per-rank batch %lld, global batch %lld, fusion %.0f MiB\n", name,
                job->rank(), job->size(), job->source().c_str(), static_cast<long long>(setup.batch),
                static_cast<long long>(setup.batch * job->size()), setup.data_parallel->comm_fusion_mb);
}

}  // namespace troupe::apps
