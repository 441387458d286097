// One rank's part of a parallel training (troupe/actors/parallel_training.hpp): the mesh, the
// groups, the sharded step, its compilation, and whole tensors to the layout and back.
#include "troupe/actors/parallel_training.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "pipeline_rank.hpp"
#include "troupe/actors/gradient_stats.hpp"
#include "troupe/actors/planner.hpp"
#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/dropout.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/plan/link.hpp"
#include "troupe/plan/propagation.hpp"
#include "troupe/plan/strategy.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

namespace {

using detail::str_cat;

// Why `tp` tensor-parallel shards cannot run `config`, or nothing.
std::optional<Error> tensor_parallel_refusal(const ParallelConfig& config, const TrainingProblem& problem, int tp) {
  if (config.jit_level <= 0)
    return Error(ErrorKind::invalid_argument,
                 str_cat("--tp ", tp, " shards the traced step, and JIT_LEVEL=0 runs eagerly; use JIT_LEVEL=1 or more"));
  if (config.loss_scaling)
    return Error(ErrorKind::unsupported, str_cat("--tp ", tp, " trains without loss scaling so far; use --loss-scale off"));
  if (!problem.placement.place)
    return Error(ErrorKind::invalid_argument, str_cat("--tp ", tp, ": the model brings no placement policy "
                                                      "(TrainingProblem::placement) to split it by"));
  return std::nullopt;
}

// The symbolic dims of the batch (dim 0 of the signature's inputs) sized `rows`.
graph::SymBindings batch_bindings(const std::vector<graph::InputSpec>& signature, std::int64_t rows) {
  graph::SymBindings bindings;
  for (const graph::InputSpec& in : signature)
    if (!in.shape.empty() && in.shape[0].symbols().size() == 1) bindings[in.shape[0].symbols()[0]] = rows;
  return bindings;
}

std::size_t bytes_of(const std::map<std::string, Tensor>& tensors) {
  std::size_t n = 0;
  for (const auto& [name, t] : tensors) n += t.nbytes();
  return n;
}

// `mine` added over `group`'s ranks. On the caller's thread, after the program answered
// (step()'s contract): no handler waits here.
GradientSums summed_over(transport::Communicator& group, const GradientSums& mine) {
  const Tensor added = Tensor::from_vector(std::vector<double>{mine.squares, mine.sum, mine.count}, {3});
  group.submit([&](transport::ProcessGroup& g) { g.all_reduce(added); }).get();
  const std::vector<double> v = added.to_vector<double>();
  return {v[0], v[1], v[2]};
}

// Why `pp` pipeline stages cannot run `config`, or nothing.
std::optional<Error> pipeline_refusal(const ParallelConfig& config, const TrainingProblem& problem, int pp) {
  if (!problem.stages.forward)
    return Error(ErrorKind::invalid_argument, str_cat("--pp ", pp, ": the model brings no split into stages "
                                                      "(TrainingProblem::stages) to place on them"));
  if (config.jit_level <= 0)
    return Error(ErrorKind::invalid_argument,
                 str_cat("--pp ", pp, " runs the traced step's stages, and JIT_LEVEL=0 runs eagerly; use JIT_LEVEL=1 or more"));
  if (!config.strategy_load.empty() || !config.strategy_save.empty())
    return Error(ErrorKind::unsupported, str_cat("--pp ", pp, ": strategy files hold dp x tp placements so far; drop --strategy-load/--strategy-save"));
  if (!config.overlap)
    return Error(ErrorKind::unsupported, str_cat("--pp ", pp, " runs on the overlapped gradient path; unset GRAD_MODE=standard"));
  return std::nullopt;
}

}  // namespace

PipelineSchedule parse_pipeline_schedule(const std::string& text) {
  if (text == "gpipe") return PipelineSchedule::gpipe;
  if (text == "1f1b") return PipelineSchedule::one_f_one_b;
  if (text == "zb-h1") return PipelineSchedule::zb_h1;
  fail(ErrorKind::invalid_argument, "pipeline schedule '", text, "' is not one of gpipe, 1f1b, zb-h1");
}

std::string schedule_name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::gpipe: return "gpipe";
    case PipelineSchedule::one_f_one_b: return "1f1b";
    case PipelineSchedule::zb_h1: return "zb-h1";
  }
  return "?";
}

ParallelTraining::ParallelTraining(TrainingProblem problem, ParallelConfig config, std::shared_ptr<Job> job)
    : problem_(std::move(problem)), config_(std::move(config)), job_(job ? std::move(job) : Job::from_environment()) {
  TROUPE_CHECK(problem_.model && problem_.loss && problem_.optimizer, invalid_argument,
               "parallel training: the problem needs a model, a loss and an optimizer factory");
  TROUPE_CHECK(problem_.global_batch >= 1, invalid_argument, "parallel training: the global batch is ",
               problem_.global_batch, "; give the rows of one step (TrainingProblem::global_batch)");
  check_stage();  // before a searched mesh's ranks meet
  if (config_.search) {
    choose_mesh();
  } else {
    dp_ = config_.dp;
    tp_ = config_.tp;
    pp_ = config_.pp;
  }
  check_settings();
  config_.dp = dp_;
  config_.tp = tp_;
  config_.pp = pp_;
  config_.micro_batches =
      static_cast<int>(std::clamp<std::int64_t>(config_.micro_batches, 1, replica_batch() / config_.accumulation));
  make_groups();
  std::vector<graph::Var> trained = problem_.model->parameters();
  if (pipeline_)  // a stage trains its own layers' parameters
    std::erase_if(trained, [&](const graph::Var& p) { return !pipeline_->parameters().count(p.name()); });
  optimizer_ = problem_.optimizer(trained);
  stepped_ = optimizer_;
  for (std::size_t g = 0; g < optimizer_->groups(); ++g) peaks_.push_back(optimizer_->lr(g));
  config_.lr_schedule.check(peaks_.at(0));
  data_parallel_.communicator = allreduce_;
  data_parallel_.fusion_mb = config_.bucket_mb > 0 ? config_.bucket_mb : 64;
  if (config_.bucket_mb == 0 && allreduce_) {
    link_ = plan::measure_link(*allreduce_);
    const plan::BucketSizes sizes = plan::choose_buckets(link_);
    data_parallel_.fusion_mb = sizes.fusion_mb;
    data_parallel_.first_bucket_mb = sizes.first_mb;
  }
  data_parallel_.zero = zero_group_ != nullptr;
  data_parallel_.zero_group = zero_group_;
  data_parallel_.overlap = config_.overlap;
  data_parallel_.gradients_mean = config_.gradients_mean;
  data_parallel_.compression = config_.grad_compression;
  if (tp_ > 1) shard_step();
  compile();
  // ZeRO-1: each rank takes its slices of the (fresh) optimizer state.
  if (ZeroState* zero = program_ ? program_->zero_state() : nullptr) zero->load(stepped_->state_dict());
}

ParallelTraining::~ParallelTraining() = default;

int ParallelTraining::rank() const { return job_->rank(); }
int ParallelTraining::size() const { return job_->size(); }
int ParallelTraining::dp_rank() const { return job_->rank() / tp_ % dp_; }
int ParallelTraining::tp_rank() const { return job_->rank() % tp_; }
int ParallelTraining::pp_rank() const { return job_->rank() / (dp_ * tp_); }
std::vector<int> ParallelTraining::stage_layers() const { return pipeline_ ? pipeline_->layers() : std::vector<int>{}; }
const std::string& ParallelTraining::source() const { return job_->source(); }

bool ParallelTraining::any_rank(bool mine) {
  if (job_->size() == 1) return mine;
  if (!agree_) {
    std::vector<int> everyone(static_cast<std::size_t>(job_->size()));
    std::iota(everyone.begin(), everyone.end(), 0);
    agree_ = job_->communicator(everyone, "agree", 7);
  }
  const Tensor votes = Tensor::scalar(mine ? 1.0 : 0.0);
  // On the caller's thread (the app's loop), not an actor's: it may wait.
  agree_->submit([&](transport::ProcessGroup& g) { g.all_reduce(votes); }).get();
  return votes.item() > 0;
}

void ParallelTraining::choose_mesh() {
  TROUPE_CHECK(problem_.placement.place, invalid_argument, "the planner places the step by the model's policy, and this ",
               "model brings none (TrainingProblem::placement); give the mesh (--dp, --tp)");
  std::vector<int> everyone(static_cast<std::size_t>(job_->size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  world_ = job_->communicator(everyone, "world", 5);
  const plan::GroupMaker group = [this](const std::vector<int>& members, const char* name) {
    return probes_.emplace_back(job_->communicator(members, name, 6));
  };
  const bool tensor_parallel = !tensor_parallel_refusal(config_, problem_, 2).has_value();
  const bool pipelines = !pipeline_refusal(config_, problem_, 2).has_value();
  const graph::TracedFunction step = graph::trace(problem_.loss, problem_.signature).with_gradients();
  MeshChoice choice;
  choice.cost.gflops = config_.gflops > 0 ? config_.gflops : plan::measure_gflops();
  choice.cost.update_gbps = config_.update_gbps > 0 ? config_.update_gbps : plan::measure_update_gbps();
  // Each rank measured its own figures: all plan with the ranks' means, so all choose alike.
  const std::vector<double> agreed = plan::agree_on_means(*world_, {choice.cost.gflops, choice.cost.update_gbps});
  choice.cost.gflops = agreed[0];
  choice.cost.update_gbps = agreed[1];
  const int world = job_->size();
  std::vector<int> tps;  // the meshes the planner may choose, whose groups' links it measures
  for (int tp = 1; tp <= world; ++tp)
    if (world % tp == 0 && (tp == 1 || (tensor_parallel && (!problem_.placement.splits || problem_.placement.splits(tp)))))
      tps.push_back(tp);
  choice.cost.mesh_links = plan::measure_mesh_links(*world_, tps, group);
  Engine engine(EngineOptions{1});
  Planner planner(engine);
  choice.candidates = planner
                          .ask({step, world, problem_.placement, batch_bindings(problem_.signature, problem_.global_batch),
                                choice.cost, config_.memory_budget, 8, config_.zero == 1,
                                pipelines ? problem_.stages : plan::StagePolicy{}, problem_.signature,
                                config_.micro_batches * config_.accumulation})
                          .get();
  const auto chosen = std::find_if(choice.candidates.begin(), choice.candidates.end(), [&](const plan::MeshCandidate& c) {
    return c.fits && (c.tp == 1 || tensor_parallel) && (c.pp == 1 || pipelines) && (config_.zero != 1 || c.dp > 1);
  });
  if (chosen == choice.candidates.end())
    fail(ErrorKind::invalid_argument, "planner: no mesh of ", world, " ranks splits the global batch of ",
         problem_.global_batch, " among its replicas",
         tensor_parallel ? "" : " without tensor parallelism (these settings rule it out: give --tp to see why)",
         config_.zero == 1 ? " with 2 or more replicas for ZeRO-1" : "",
         " and fits the memory; give --dp and --tp, or another --batch");
  dp_ = chosen->dp;
  tp_ = chosen->tp;
  pp_ = chosen->pp;
  choice_ = std::move(choice);
}

void ParallelTraining::check_stage() const {
  TROUPE_CHECK(config_.zero == 0 || config_.zero == 1, invalid_argument, "ZeRO stage ", config_.zero,
               " is not built; use --zero 0 or 1");
  TROUPE_CHECK(config_.zero == 0 || (config_.jit_level > 0 && config_.overlap), invalid_argument, "--zero 1 runs on the "
               "actor runtime's overlapped gradient path; unset JIT_LEVEL=0 and GRAD_MODE=standard");
}

void ParallelTraining::check_settings() const {
  TROUPE_CHECK(dp_ >= 1, invalid_argument, "--dp must be >= 1, got ", dp_);
  TROUPE_CHECK(tp_ >= 1, invalid_argument, "--tp must be >= 1, got ", tp_);
  TROUPE_CHECK(pp_ >= 1, invalid_argument, "--pp must be >= 1, got ", pp_);
  TROUPE_CHECK(config_.zero == 0 || dp_ > 1, invalid_argument, "--zero 1 splits the optimizer state among the "
               "data-parallel replicas, and --dp 1 has one; use --dp 2 or more, or drop --zero");
  TROUPE_CHECK(config_.zero == 0 || config_.grad_compression.kind == GradCompression::Kind::none, invalid_argument,
               "--grad-compression ", config_.grad_compression.str(),
               " needs --zero 0: ZeRO-1 reduce-scatters whole buckets; pick one of them");
  // Before joining: every rank refuses alike, at once.
  if (tp_ > 1)
    if (const std::optional<Error> e = tensor_parallel_refusal(config_, problem_, tp_)) throw *e;
  if (pp_ > 1)
    if (const std::optional<Error> e = pipeline_refusal(config_, problem_, pp_)) throw *e;
  if (pp_ > 1 || !config_.pp_layers.empty())
    plan::stage_layers(problem_.stages.layers, pp_, config_.pp_layers);  // its errors, before any rank waits
  const int ranks = dp_ * tp_ * pp_;
  std::string mesh = str_cat("--dp ", dp_);
  if (tp_ > 1) mesh += str_cat(" x --tp ", tp_);
  if (pp_ > 1) mesh += str_cat(" x --pp ", pp_);
  TROUPE_CHECK(ranks == job_->size() || (ranks == 1 && job_->size() == 1), invalid_argument,
               mesh, " but this process is rank ",
               job_->rank(), " of a ", job_->size(), "-rank job (", job_->source(), "); start it with troupe-launch -n ",
               ranks, " -- ...");
  TROUPE_CHECK(problem_.global_batch % dp_ == 0, invalid_argument, "the global batch of ", problem_.global_batch,
               " rows does not split among ", dp_, " data-parallel replicas; give a batch that ", dp_, " divides");
  TROUPE_CHECK(config_.accumulation >= 1 && replica_batch() % config_.accumulation == 0, invalid_argument,
               "gradient accumulation over ", config_.accumulation, " batches needs a replica's ", replica_batch(),
               " rows to split into that many equal batches; give an accumulation count that divides them");
}

void ParallelTraining::make_groups() {
  // Every rank makes the same communicators in the same order (each is a collective of the job).
  std::vector<int> dp_members, tp_members, pp_members;
  const int stage = pp_rank() * dp_ * tp_;  // the first rank of this rank's stage
  for (int i = 0; i < dp_; ++i) dp_members.push_back(stage + i * tp_ + tp_rank());
  for (int j = 0; j < tp_; ++j) tp_members.push_back(stage + dp_rank() * tp_ + j);
  for (int k = 0; k < pp_; ++k) pp_members.push_back(k * dp_ * tp_ + dp_rank() * tp_ + tp_rank());
  if (dp_ > 1) {
    allreduce_ = job_->communicator(dp_members, "allreduce", 0);
    allgather_ = job_->communicator(dp_members, "allgather", 1);
    if (config_.zero == 1) zero_group_ = job_->communicator(dp_members, "zero", 4);
  }
  if (tp_ > 1) {
    tp_group_ = job_->communicator(tp_members, "tp", 2);
    tp_norms_ = job_->communicator(tp_members, "tp-norms", 3);
  }
  if (pp_ > 1)
    pipeline_ = std::make_unique<PipelineRank>(*job_, pp_members, problem_.stages,
                                               plan::stage_layers(problem_.stages.layers, pp_, config_.pp_layers),
                                               problem_.signature, config_.amp);
}

void ParallelTraining::adopt_compression(const std::string& text) {
  const std::string& file = config_.strategy_load;
  GradCompression theirs;
  try {
    theirs = GradCompression::parse(text);
  } catch (const Error& e) {
    fail(ErrorKind::invalid_argument, "strategy file '", file, "': ", e.message(), "; save it again with --strategy-save");
  }
  GradCompression& mine = config_.grad_compression;
  if (theirs.kind == GradCompression::Kind::none || theirs.str() == mine.str()) return;
  TROUPE_CHECK(mine.kind == GradCompression::Kind::none, invalid_argument, "strategy file '", file,
               "' compresses the gradients as ", theirs.str(), ", the settings as ", mine.str(),
               "; pass --grad-compression ", theirs.str(), " or none (to take the file's)");
  TROUPE_CHECK(config_.zero == 0, invalid_argument, "strategy file '", file, "' compresses the gradients as ",
               theirs.str(), ", which needs ZeRO-1 off; train it without --zero 1");
  mine = theirs;
  data_parallel_.compression = theirs;
}

void ParallelTraining::shard_step() {
  // Mixed precision's casts are ops like the others: they follow their input's placement, and the
  // collectives sum low-precision values in f32. A pipeline stage's step is placed likewise: its
  // sends and receives have no sharding rule and move replicated values (a block's output, the
  // received input's gradient, which Megatron's placement all-reduces).
  const graph::TracedFunction traced =
      pipeline_ ? pipeline_->forward().with_stage_gradients(pipeline_->channels())
                : graph::trace(problem_.loss, problem_.signature).with_amp(config_.amp).with_gradients();
  const graph::Mesh mesh = plan::job_mesh(dp_, tp_, dp_ * tp_);
  std::optional<plan::Strategy> loaded;
  if (!config_.strategy_load.empty()) {
    loaded = plan::load_strategy(config_.strategy_load);
    adopt_compression(loaded->grad_compression);
  }
  const plan::PlacementRequest request = loaded ? plan::strategy_request(*loaded, traced, mesh, config_.strategy_load)
                                                : problem_.placement.place(traced, mesh, config_.zero == 1);
  // ZeRO-1 is the runtime's (DataParallel::zero): a strategy that splits the gradients over dp needs it.
  for (const auto& [v, p] : request.required)
    TROUPE_CHECK(config_.zero == 1 || dp_ == 1 || p[0].kind != graph::Placement::Kind::split, invalid_argument,
                 "strategy file '", config_.strategy_load, "' splits the gradients over dp (ZeRO-1); train it with --zero 1");
  if (!config_.strategy_save.empty() && rank() == 0) {
    const graph::GraphPlacement whole = plan::propagate_sharding(traced.graph(), mesh, request.given, request.required,
                                                                 batch_bindings(problem_.signature, problem_.global_batch));
    plan::Strategy saved = plan::make_strategy(traced, mesh, request, whole);
    saved.grad_compression = config_.grad_compression.str();
    plan::save_strategy(config_.strategy_save, saved);
  }
  const auto [tp_mesh, along_tp] = plan::project_request(request, mesh, "tp");
  sharded_ = std::make_shared<TensorParallelStep>(
      traced,
      plan::propagate_sharding(traced.graph(), tp_mesh, along_tp.given, along_tp.required,
                               batch_bindings(traced.signature(), replica_batch())),
      tp_group_);
  stepped_ = problem_.optimizer(sharded_->trained());
}

void ParallelTraining::compile() {
  if (config_.jit_level == 0) return;
  engine_ = std::make_unique<Engine>(EngineOptions{static_cast<std::size_t>(config_.threads)});
  ProgramOptions po;
  // Accumulation runs its batches' micro-batches through the same step, one after another as the
  // registers free, their gradients adding up before the one update.
  po.micro_batches = config_.micro_batches * config_.accumulation;
  po.optimizers = {stepped_};
  po.clip_grad_norm = config_.clip;
  po.clip_mode = config_.overlap ? ClipMode::parallel : ClipMode::naive;
  po.data_parallel = data_parallel_;
  po.return_gradients = config_.measure_gradients;  // otherwise their memory is free for the next step
  if (config_.loss_scaling) scaler_ = std::make_shared<graph::GradScaler>();
  po.loss_scaler = scaler_;
  const int level = config_.jit_level;
  if (pipeline_) {
    // The schedule is the registers: an actor of stage i runs at most that many micro-batches
    // ahead of the ones whose backward has let their activations go.
    po.registers = config_.schedule == PipelineSchedule::gpipe ? std::max(2, po.micro_batches) : pp_ - pp_rank();
    po.defer_weight_gradients = config_.schedule == PipelineSchedule::zb_h1;
    po.pipeline_norms = pipeline_->group();
    if (pipeline_->parameters().empty()) {  // a stage of no layers: nothing to update (its norm and scale: step())
      po.optimizers.clear();
      po.clip_grad_norm = 0;
      po.pipeline_norms = nullptr;
      po.loss_scaler = nullptr;
    }
    if (!sharded_) {
      // Optimized before the gradients (fusion) and after (forward and backward together); the
      // last stage's backward starts from the loss scale, the others' gradients arrive scaled.
      const graph::Var seed = scaler_ && pipeline_->last() ? scaler_->scale_var() : graph::Var();
      program_ = engine_->compile(
          pipeline_->forward().optimized(level).with_stage_gradients(pipeline_->channels(), seed).optimized(level), po);
      return;
    }
  }
  // A sharded step runs the passes on the device's graph (its collectives stay where they are): the
  // fusions before the gradients would need sharding rules for the fused ops.
  if (sharded_) {
    po.tensor_parallel = {tp_norms_, sharded_->replicated()};
    program_ = engine_->compile(sharded_->local().optimized(level), po);
    return;
  }
  // Optimized before the gradients (fusion) and after (forward and backward together).
  const graph::Var seed = scaler_ ? scaler_->scale_var() : graph::Var();
  program_ = engine_->compile(graph::trace(problem_.loss, problem_.signature)
                                  .with_amp(config_.amp)
                                  .optimized(level)
                                  .with_gradients({}, seed)
                                  .optimized(level),
                              po);
}

StepReport ParallelTraining::step(const std::vector<Tensor>& batch) {
  std::vector<Tensor> inputs = batch;
  if (dp_ > 1) {
    // Every rank has the global batch and keeps its replica's rows, so N replicas see what one
    // process at N times the batch would.
    const std::int64_t r = dp_rank(), rows = replica_batch();
    for (Tensor& t : inputs) t = t.slice(0, r * rows, (r + 1) * rows).contiguous();
  }
  if (pipeline_) inputs = pipeline_->inputs(inputs);
  schedule_lr(steps_ + 1);
  if (!program_) {
    StepReport out = run_eager(inputs);
    ++steps_;
    return out;
  }
  StepReport out;
  const StepResult r = program_->run(inputs, {config_.seed, static_cast<std::uint64_t>(steps_ + 1), dp_rank() * replica_batch()});
  ++steps_;
  out.lr = stepped_->lr(0);
  // A stage that trains nothing adds its zero to the clipping norm's sum over the pipeline, in
  // the same order as the others' clip actors (before the loss), and with loss scaling updates
  // its scale as they do theirs, from that sum.
  if (pipeline_ && pipeline_->parameters().empty() && (config_.clip > 0 || scaler_)) {
    const double squared = pipeline_->add_to_sum(0);
    if (scaler_) {
      out.loss_scale = scaler_->scale();
      out.skipped = !std::isfinite(squared);
      scaler_->update(out.skipped);
    }
  }
  // A stage before the last has the token of its send where the loss would be.
  out.loss = pipeline_ ? pipeline_->from_last(r.outputs[0].item()) : r.outputs[0].item();
  out.bucket_squared_norms = r.bucket_squared_norms;
  out.comm_ms = r.comm_ms;
  out.exposed_comm_ms = r.exposed_comm_ms;
  out.comm_bytes = r.comm_bytes;
  if (!pipeline_ || !pipeline_->parameters().empty()) {
    out.loss_scale = scaler_ ? r.loss_scale : 0;
    out.skipped = r.skipped;
  }
  if (const CompressionState* c = program_->compression_state(); c && !compression_chosen_) {
    out.compression_choice = c->choice();
    compression_chosen_ = !out.compression_choice.empty();
  }
  if (config_.check_gradients) out.gradient_warnings = compare_bucket_norms(r.bucket_squared_norms);
  if (!config_.measure_gradients) return out;
  GradientSums sums;
  if (sharded_) {
    // Each rank's shards, the gradients its group holds whole counted 1/n; the group adds the sums.
    const std::vector<std::string>& whole = sharded_->replicated();
    const double n = tp_;
    const GradientSums mine = gradient_sums(r.gradients, [&](const std::string& name) {
      return std::find(whole.begin(), whole.end(), name) != whole.end() ? 1.0 / n : 1.0;
    });
    sums = summed_over(*tp_norms_, mine);
  } else {
    sums = gradient_sums(r.gradients);
  }
  if (pipeline_) sums = summed_over(*pipeline_->group(), sums);  // each stage's gradients are its own layers'
  auto [norm, variance] = gradient_stats(sums);
  // The returned gradients are clipped; report the norm and variance from before clipping.
  const double scale = config_.clip > 0 ? kernels::clip_coefficient(r.grad_norm, config_.clip) : 1.0;
  out.grad_norm = config_.clip > 0 ? r.grad_norm : norm;
  out.grad_variance = scale > 0 ? variance / (scale * scale) : variance;
  return out;
}

void ParallelTraining::set_steps(std::int64_t steps) {
  TROUPE_CHECK(steps >= 0, invalid_argument, "parallel training: cannot continue after ", steps, " steps");
  steps_ = steps;
}

double ParallelTraining::next_lr() const {
  return config_.lr_schedule.active() ? config_.lr_schedule.lr(peaks_.at(0), steps_ + 1) : stepped_->lr(0);
}

void ParallelTraining::schedule_lr(std::int64_t update) {
  if (!config_.lr_schedule.active()) return;
  // Group 0 follows the schedule; the others keep their ratio to it (the floor scaled alike).
  const double first = config_.lr_schedule.lr(peaks_.at(0), update);
  for (std::size_t g = 0; g < peaks_.size(); ++g) {
    const double lr = g == 0 ? first : (peaks_[0] > 0 ? first * peaks_[g] / peaks_[0] : 0.0);
    optimizer_->set_lr(lr, g);
    stepped_->set_lr(lr, g);
  }
}

StepReport ParallelTraining::run_eager(const std::vector<Tensor>& inputs) {
  StepReport out;
  graph::Module& model = *problem_.model;
  optimizer_->zero_grad();
  // Accumulation: each batch's loss weighted by its share of the rows, its gradients added to the
  // others' on the parameters (backward accumulates), as the program's micro-batches are.
  const std::int64_t parts = config_.accumulation, rows = inputs.at(0).shape().at(0), each = rows / parts;
  Tensor loss_value;
  double mean_loss = 0;
  for (std::int64_t k = 0; k < parts; ++k) {
    std::vector<graph::Var> part;
    for (const Tensor& t : inputs) part.emplace_back(parts == 1 ? t : t.slice(0, k * each, (k + 1) * each).contiguous());
    // Dropout draws as the program's micro-batches do: from this part's rows of the global batch on.
    const graph::RandomScope position({config_.seed, static_cast<std::uint64_t>(steps_ + 1), dp_rank() * replica_batch() + k * each});
    const graph::Var loss = problem_.loss(part)[0];
    graph::backward(parts == 1 ? loss : loss * (1.0 / static_cast<double>(parts)));
    if (parts == 1) loss_value = loss.tensor().contiguous().clone();
    mean_loss += loss.tensor().item() / static_cast<double>(parts);
  }
  if (parts > 1) loss_value = Tensor::scalar(mean_loss, DType::f32);
  std::map<std::string, Tensor> grads;
  for (const auto& [name, p] : model.named_parameters())
    if (p.grad().defined()) grads[name] = p.grad();
  if (allreduce_) {
    // Eager data parallel: the plain path, one AllReduce per gradient after backward.
    allreduce_
        ->submit([&](transport::ProcessGroup& g) {
          for (auto& [name, t] : grads) {
            t = t.contiguous().clone();
            g.all_reduce(t, config_.gradients_mean ? transport::ReduceOp::mean : transport::ReduceOp::sum);
          }
          g.all_reduce(loss_value, transport::ReduceOp::mean);
        })
        .get();
    for (const auto& [name, p] : model.named_parameters())
      if (grads.count(name)) p.set_grad(grads.at(name));
  }
  if (config_.measure_gradients) std::tie(out.grad_norm, out.grad_variance) = gradient_stats(grads);
  if (config_.clip > 0) graph::clip_grad_norm(model.parameters(), config_.clip);
  out.lr = optimizer_->lr(0);
  optimizer_->step();
  optimizer_->zero_grad();
  out.loss = loss_value.item();
  return out;
}

std::vector<std::string> ParallelTraining::compare_bucket_norms(const std::vector<double>& squared_norms) {
  std::vector<std::string> warnings;
  if (!allgather_) return warnings;
  Tensor mine = Tensor::from_vector(squared_norms, {static_cast<std::int64_t>(squared_norms.size())});
  Tensor all;
  // On the caller's thread, after the program answered (step()'s contract): no handler waits here.
  allgather_->submit([&](transport::ProcessGroup& g) { all = g.all_gather(mine); }).get();
  const auto v = all.to_vector<double>();
  const std::size_t buckets = squared_norms.size();
  for (std::size_t b = 0; b < buckets; ++b)
    for (int r = 1; r < dp_; ++r) {
      const double a = std::sqrt(v[b]), x = std::sqrt(v[static_cast<std::size_t>(r) * buckets + b]);
      const double diff = std::abs(a - x) / std::max(std::abs(a), 1e-30);
      if (diff > 1e-5) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "bucket %zu: replica 0 gradient norm %.9g, replica %d %.9g (relative difference %.3g)",
                      b, a, r, x, diff);
        warnings.emplace_back(buf);
      }
    }
  return warnings;
}

std::optional<graph::MemoryPlanReport> ParallelTraining::memory_report() const {
  return program_ ? program_->memory_report() : std::nullopt;
}

void ParallelTraining::gather_parameters() {
  if (program_) program_->settle();
  std::map<std::string, graph::Var> params;
  for (const auto& [name, p] : problem_.model->named_parameters()) params[name] = p;
  // This stage's parameters whole from the tp group's shards, then every stage's to every stage.
  if (sharded_)
    for (const auto& [name, whole] : sharded_->gather(sharded_->parameter_shards())) params.at(name).set_value(whole);
  if (!pipeline_) return;
  std::map<std::string, Tensor> mine;
  for (const std::string& name : pipeline_->parameters()) mine[name] = params.at(name).tensor();
  for (const auto& [name, whole] : pipeline_->gather(mine))
    if (!pipeline_->parameters().count(name)) params.at(name).set_value(whole);
}

void ParallelTraining::release_parameters() {
  if (sharded_)
    for (const auto& [name, p] : problem_.model->named_parameters()) p.set_value(Tensor());
}

std::map<std::string, Tensor> ParallelTraining::optimizer_state() {
  if (program_) program_->settle();
  ZeroState* zero = program_ ? program_->zero_state() : nullptr;
  std::map<std::string, Tensor> state = zero ? zero->gather() : stepped_->state_dict();
  if (const CompressionState* c = program_ ? program_->compression_state() : nullptr)
    for (auto& [key, value] : c->gather())
      // A tp rank's warm starts and auto's choices are its shards' own: only the errors (gathered
      // like the parameters) and the step count are saved then.
      if (!sharded_ || key == "grad_compression.rounds" || key.rfind("grad_compression.", 0) != 0) state[key] = value;
  if (sharded_) state = sharded_->gather(state);
  return pipeline_ ? pipeline_->gather(state) : state;
}

void ParallelTraining::load_optimizer_state(const std::map<std::string, Tensor>& whole) {
  if (program_) program_->settle();
  std::map<std::string, Tensor> optimizer, compression;
  for (const auto& [key, value] : whole) {
    if (pipeline_ && !pipeline_->takes(key)) continue;  // another stage's
    (CompressionState::holds(key) ? compression : optimizer)[key] = value;
  }
  optimizer_->load_state_dict(optimizer);  // checks it fits the model's optimizer before anything changes
  CompressionState* c = program_ ? program_->compression_state() : nullptr;
  if (c) c->load(sharded_ ? sharded_->shard(compression) : compression);  // (a run without it drops the state)
  if (sharded_) stepped_->load_state_dict(sharded_->shard(optimizer));
  if (ZeroState* zero = program_ ? program_->zero_state() : nullptr) zero->load(stepped_->state_dict());
}

std::size_t ParallelTraining::held_parameter_bytes() const {
  if (sharded_) return bytes_of(sharded_->parameter_shards());
  std::size_t n = 0;
  for (const auto& [name, p] : problem_.model->named_parameters())
    if (!pipeline_ || pipeline_->parameters().count(name)) n += p.tensor().nbytes();
  return n;
}

std::size_t ParallelTraining::held_optimizer_bytes() const {
  ZeroState* zero = program_ ? program_->zero_state() : nullptr;
  return bytes_of(zero ? zero->kept() : stepped_->state_dict());
}

}  // namespace troupe::actors
