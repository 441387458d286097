#pragma once
// Parallel training as one object. Given what is trained (a model, its traced loss, the global
// batch, an optimizer factory and the model's placement policy), the job's devices and one
// ParallelConfig, a ParallelTraining makes the job's communicators, chooses the mesh (given, or the
// planner's), places and shards the step along tp, compiles it on an actor engine with data
// parallelism (buckets, overlap, ZeRO-1) and clipping, and moves whole tensors to its layout and
// back, so that a checkpoint saved under one layout resumes under another.
//
// Rank r of a dp x tp x pp job is pipeline stage r / (dp tp), data-parallel replica (r / tp) % dp
// and tensor-parallel shard r % tp (with pp 1: replica r / tp). Along dp run the gradient
// buckets, ZeRO-1's all-gathers and --check-grads' comparisons; along tp the step's collectives
// and the clipping norm; along pp the activations and their gradients between neighbouring
// stages, the clipping norm and the loss; each has communicators of its own.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "troupe/actors/engine.hpp"
#include "troupe/actors/job.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/actors/step_report.hpp"
#include "troupe/actors/tensor_parallel.hpp"
#include "troupe/graph/amp.hpp"
#include "troupe/graph/lr_schedule.hpp"
#include "troupe/graph/module.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/plan/cost_model.hpp"
#include "troupe/plan/mesh_search.hpp"
#include "troupe/plan/placement.hpp"
#include "troupe/plan/stages.hpp"

namespace troupe::actors {

class PipelineRank;

/// How a pipeline's stages take their micro-batches in turn (docs/PARALLELISM.md, "Pipeline
/// parallelism"): a register count on each stage's actors, the back-pressure of the register
/// protocol; no scheduler decides.
enum class PipelineSchedule {
  gpipe,        // every micro-batch may be in flight: a stage holds up to all m micro-batches' activations
  one_f_one_b,  // stage i holds at most pp - i: after its warm-up each forward waits for a backward (1F1B)
  zb_h1,        // 1F1B's registers, each backward's weight gradients after its input gradient is sent (ZB-H1)
};
/// Parses "gpipe", "1f1b" or "zb-h1"; throws naming the text and what is accepted.
PipelineSchedule parse_pipeline_schedule(const std::string& text);
/// The name parse_pipeline_schedule() reads back.
std::string schedule_name(PipelineSchedule schedule);

/// How a training runs in parallel: every setting in one place; the defaults train one process
/// on the actor runtime with one thread.
struct ParallelConfig {
  int dp = 1;  // data-parallel replicas
  int tp = 1;  // tensor-parallel shards of each replica (needs the model's placement policy)
  int pp = 1;  // pipeline stages of each replica, each a contiguous run of layers (needs the model's stage policy)
  std::vector<int> pp_layers;  // the layers of each stage (empty: as even as they split, earlier stages one more)
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // with pp > 1
  /// Instead of dp, tp and pp: the planner chooses the mesh for the job's ranks, the fastest it
  /// predicts among those that fit `memory_budget` (on links and speeds measured at start, agreed
  /// by all ranks); pipelines too when the model brings its split into stages (at `micro_batches`).
  bool search = false;
  double memory_budget = 0;  // bytes per device, for the search (0: none)
  double gflops = 0;         // each device's speed for the search's cost model (0: measured here)
  double update_gbps = 0;    // each device's bandwidth at the optimizer's update (0: measured here)
  std::string strategy_load;  // a strategy file to place the step by instead of the policy (its mesh: dp x tp; its
                              // gradient compression when grad_compression is none)
  std::string strategy_save;  // rank 0 writes the placement (and gradient compression) it runs to this strategy file
  int zero = 0;               // ZeRO stage: 1 splits the optimizer state among the dp replicas
  double bucket_mb = 0;       // AllReduce bucket limit in MiB (0: from the dp group's link, measured at start)
  bool overlap = true;        // false: the textbook path, one AllReduce per gradient after backward and a naive clip norm
  GradCompression grad_compression;  // how the dp buckets travel (program.hpp; not with zero)
  double clip = 0;            // global gradient-norm clipping threshold (0: off)
  int micro_batches = 1;      // per step, flowing through the actors concurrently
  /// Gradient accumulation: each step's rows on a replica run as this many consecutive batches
  /// (each of micro_batches micro-batches) whose gradients add up into one update, as one batch of
  /// all the rows would give. The register protocol lets two micro-batches overlap, so the
  /// activations held are about two batches' whatever the count (gpt-mini, batch 8: 113 MB alone,
  /// 214 MB accumulating 4, 315 MB as one batch of 32).
  int accumulation = 1;
  bool gradients_mean = true; // average the replicas' gradients (false: sum them), the article's gradients_mean
  graph::LrSchedule lr_schedule;  // each update's learning rate from the optimizer's own (the peak); constant: unchanged
  std::uint64_t seed = 0;     // what dropout draws from, with the step and each row's place in the global batch
  int threads = 1;            // the engine's scheduler threads
  int jit_level = 1;          // the passes (graph::jit_level); 0: eager steps without actors (dp alone)
  graph::AmpOptions amp;      // mixed precision of the traced step
  bool loss_scaling = false;  // dynamic loss scaling (graph::GradScaler's defaults); not with tp yet
  bool measure_gradients = false;  // each step also reports the gradients' norm and variance (extra passes)
  bool check_gradients = false;    // each step compares the replicas' reduced bucket norms
};

/// Makes an optimizer over the parameters it is given: the model's, or a tensor-parallel rank's shards.
using OptimizerFactory = std::function<std::shared_ptr<graph::Optimizer>(const std::vector<graph::Var>& parameters)>;

/// What is trained.
struct TrainingProblem {
  graph::Module* model = nullptr;          // its weights as they are now are the starting point
  graph::TraceableFn loss;                 // the loss of a batch, one 0-d output (a mean over the rows)
  std::vector<graph::InputSpec> signature;  // the loss' inputs; dim 0 of each is the batch's rows
  std::int64_t global_batch = 0;           // rows per step over all replicas, which split them evenly
  OptimizerFactory optimizer;
  plan::PlacementPolicy placement;         // the model's placement along tp (tp > 1, search, strategy_save)
  plan::StagePolicy stages;                // the model's split into pipeline stages (pp > 1)
};

/// The planner's choice of a searched mesh, for the caller to report.
struct MeshChoice {
  plan::CostModel cost;                      // the speeds the ranks agreed on and the links measured
  std::vector<plan::MeshCandidate> candidates;  // fastest first among those that fit (the choice: dp(), tp(), pp())
};

/// One rank's part of a parallel training.
class ParallelTraining {
 public:
  /// Checks the settings, joins the job's groups (collectives of the whole job: every rank
  /// constructs its ParallelTraining at the same point), measures what the config leaves to
  /// measurement, places and compiles the rank's step. `job` null: Job::from_environment(). The
  /// config's dp x tp (or the searched mesh) must use every rank of the job. Throws troupe::Error
  /// naming the setting that cannot be run, on every rank alike: the ZeRO stage and its gradient
  /// path, and a given mesh's settings, before any rank waits for another; a searched mesh's once
  /// the ranks have met; a placement the model's policy refuses (heads that tp does not divide)
  /// once the groups are made.
  ParallelTraining(TrainingProblem problem, ParallelConfig config, std::shared_ptr<Job> job = nullptr);
  ~ParallelTraining();
  ParallelTraining(const ParallelTraining&) = delete;
  ParallelTraining& operator=(const ParallelTraining&) = delete;

  /// One step on a batch of global_batch rows (this replica takes its own rows): forward,
  /// backward, the gradients' reduction, clipping and the optimizer's update. Like Program::run it
  /// returns when the step is over, blocking the calling thread (the caller's, never an actor's
  /// handler): the step's own collectives complete by message inside the runtime, and what step()
  /// adds after it (the tp group's gradient sums for measure_gradients, check_gradients' all-gather)
  /// waits on that same thread.
  StepReport step(const std::vector<Tensor>& batch);

  /// The settings it runs with: the searched mesh's dp and tp filled in, the micro-batches at most
  /// the replica's rows.
  const ParallelConfig& config() const { return config_; }
  int rank() const;
  int size() const;
  int dp() const { return dp_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int dp_rank() const;
  int tp_rank() const;
  int pp_rank() const;
  /// With pp > 1, each stage's layer count; empty otherwise.
  std::vector<int> stage_layers() const;
  /// Updates taken so far: set_steps' count plus the steps run since.
  std::int64_t steps() const { return steps_; }
  /// Continues a resumed run after `steps` updates (the learning-rate schedule's position).
  void set_steps(std::int64_t steps);
  /// The learning rate (group 0's) the next step's update will use.
  double next_lr() const;
  /// Rows of this replica's share of a step's batch (every stage of its pipeline sees them).
  std::int64_t replica_batch() const { return problem_.global_batch / dp_; }
  /// How the job was started ("troupe-launch", "virtual devices", ...).
  const std::string& source() const;
  /// The planner's choice when the config asked for a search.
  const std::optional<MeshChoice>& mesh_choice() const { return choice_; }
  /// The data-parallel options the step runs with (bucket sizes chosen from the link when asked).
  const DataParallel& data_parallel() const { return data_parallel_; }
  /// The dp group's link as measured for the bucket sizes (zeros when it was not).
  const plan::CostModel::Link& link() const { return link_; }
  /// This rank's sharded step with tp > 1, otherwise null.
  const TensorParallelStep* tensor_parallel() const { return sharded_.get(); }
  /// The engine the step runs on (null with jit_level 0), for programs of the caller's (evaluation).
  Engine* engine() const { return engine_.get(); }
  /// The dynamic loss scaler, or null without loss scaling (checkpoints save its state).
  graph::GradScaler* loss_scaler() const { return scaler_.get(); }
  /// JIT level 3: the planned and measured peak memory of the steps.
  std::optional<graph::MemoryPlanReport> memory_report() const;
  /// Whether ZeRO-1 splits the optimizer state.
  bool zero() const { return data_parallel_.zero; }

  /// Makes the model's parameters whole as the last step left them (written by ZeRO-1's
  /// all-gather; with tp gathered from the group's shards): a collective of the job, every rank
  /// calling it at the same point, before evaluating or saving them.
  void gather_parameters();
  /// With tp, lets the model's whole parameters go again (a rank holds only its shards while training).
  void release_parameters();
  /// True when any rank of the job passes true, the same answer on every rank: a collective of the
  /// whole job, every rank calling it at the same point, for a decision all must take alike (a
  /// checkpoint when some rank's clock says it is time).
  bool any_rank(bool mine);
  /// The whole optimizer state, as one process's optimizer over the model would hold it (keyed as
  /// Optimizer::state_dict): gathered from ZeRO-1's slices and tp's shards, a collective as above.
  /// With gradient compression, its state too (CompressionState::gather's keys; with tp > 1 only
  /// the errors and the step count: the warm starts and auto's choices are the shards' own).
  std::map<std::string, Tensor> optimizer_state();
  /// Starts from `whole`, a whole optimizer state saved under any layout: this rank takes its
  /// shards and slices, and the gradient compression's state when it compresses (else drops it).
  /// Throws when it does not fit the model's optimizer, changing nothing.
  void load_optimizer_state(const std::map<std::string, Tensor>& whole);
  /// Bytes this rank holds of the parameters (its shards) and of the optimizer state (its slices).
  std::size_t held_parameter_bytes() const;
  std::size_t held_optimizer_bytes() const;

 private:
  void choose_mesh();
  // The settings that hold whatever the mesh (the ZeRO stage and its gradient path), and those of the mesh.
  void check_stage() const;
  void check_settings() const;
  void make_groups();
  void shard_step();
  // A loaded strategy file's gradient compression, taken when the settings name none.
  void adopt_compression(const std::string& text);
  void compile();
  StepReport run_eager(const std::vector<Tensor>& inputs);
  // Sets the optimizers' rates for update `update` from the schedule and the peaks.
  void schedule_lr(std::int64_t update);
  std::vector<std::string> compare_bucket_norms(const std::vector<double>& squared_norms);

  TrainingProblem problem_;
  ParallelConfig config_;
  std::shared_ptr<Job> job_;
  int dp_ = 1, tp_ = 1, pp_ = 1;
  std::optional<MeshChoice> choice_;
  // The job's communicators: along dp, along tp, and the search's (kept: they close together).
  std::shared_ptr<transport::Communicator> allreduce_, allgather_, zero_group_, tp_group_, tp_norms_, world_;
  std::shared_ptr<transport::Communicator> agree_;  // the whole job, for any_rank (made at its first call)
  std::vector<std::shared_ptr<transport::Communicator>> probes_;
  plan::CostModel::Link link_{0, 0};
  DataParallel data_parallel_;
  std::shared_ptr<graph::Optimizer> optimizer_;  // over the model's parameters: what checkpoints hold
  std::shared_ptr<graph::Optimizer> stepped_;    // what the step updates: optimizer_, or over tp's shards
  std::shared_ptr<TensorParallelStep> sharded_;
  std::unique_ptr<PipelineRank> pipeline_;  // this rank's stage with pp > 1
  std::shared_ptr<graph::GradScaler> scaler_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Program> program_;
  std::vector<double> peaks_;  // each group's learning rate as the optimizer factory made it
  std::int64_t steps_ = 0;
  bool compression_chosen_ = false;  // auto's choice was reported
};

}  // namespace troupe::actors
