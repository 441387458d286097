#pragma once
// The training step both apps run, and the flags that shape a run. A step is an actor program
// (traced loss with gradients, the optimizer as an actor, clipping inside the program) or, with
// JIT_LEVEL=0, the same step done eagerly; both report the same StepOutcome.

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "troupe/actors/engine.hpp"
#include "troupe/actors/tensor_parallel.hpp"
#include "troupe/apps/grad_mode.hpp"
#include "troupe/apps/metrics.hpp"
#include "troupe/apps/train_loop.hpp"
#include "troupe/graph/amp.hpp"
#include "troupe/graph/module.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::apps {

/// --amp and --amp-dtype, as training and inference commands take them. Inference defaults to O0
/// (its outputs then match f32 references bit for bit on every machine), training to auto.
struct AmpFlags {
  std::string level = "O0", dtype = "bf16";
};

/// Registers AmpFlags on `app` (a command or a subcommand), with the defaults they hold; given
/// twice, the last one counts (so a script's defaults can be overridden by appending).
void add_amp_flags(CLI::App& app, AmpFlags& flags);

/// The flags every training app has (steps, cadences, outputs, threads, clipping, precision).
struct RunFlags {
  std::int64_t steps = 200, eval_every = 50, save_every = 100, log_every = 10;
  double clip = 0;
  std::string save, resume, metrics, trace;
  int threads = 0, micro_batches = 0;
  AmpFlags amp{"auto", "bf16"};  // O2 where the CPU computes bf16 natively (resolve_amp)
  std::string loss_scale = "auto";             // dynamic loss scaling: auto (with fp16), dynamic, off
};

/// Registers RunFlags on `app`, each numeric flag with its range; `steps` and `clip` keep the
/// defaults they hold.
void add_run_flags(CLI::App& app, RunFlags& flags);

/// The cadence and output part of LoopOptions from the flags.
LoopOptions loop_options(const RunFlags& flags);

/// Scheduler threads for `flags.threads` (0 = the machine's cores).
int resolve_threads(const RunFlags& flags);
/// Micro-batches for the flag (0 = 2 on several threads, else 1), at most the batch's rows; the
/// program splits a batch the count does not divide unevenly, weighting each part by its rows.
int resolve_micro_batches(const RunFlags& flags, int threads, std::int64_t batch);

/// The mixed precision the flags ask for, checked against the JIT level (AMP rewrites traced
/// graphs, so it needs JIT_LEVEL >= 1) and the CPU: f16 where oneDNN has no f16 products is an
/// error; bf16 on a CPU without native bf16 would be slower than f32, so it runs at O0 after a
/// warning on stderr naming `app` and the CPU's instruction set. "auto" is O2 where the CPU
/// computes --amp-dtype natively and the JIT level allows it, else O0, without a warning (O2's
/// losses track f32's: docs/PERFORMANCE.md, "Mixed precision").
graph::AmpOptions resolve_amp(const AmpFlags& flags, int jit_level, const std::string& app);
/// Whether the step scales its loss dynamically: --loss-scale dynamic, or auto with fp16 products
/// (bf16 has f32's range and needs none); needs JIT_LEVEL >= 1 (the actor runtime divides it out).
/// O3 trains with a loss scale of 1: auto is off there and dynamic an error.
bool resolve_loss_scaling(const RunFlags& flags, const graph::AmpOptions& amp, int jit_level);

/// The tensor-parallel part of a training step.
struct TensorParallelStepOptions {
  std::shared_ptr<actors::TensorParallelStep> step;     // this device's step; null: no tensor parallelism
  std::shared_ptr<transport::Communicator> norms;       // the tp group for the clipping norm
};

/// How a training step runs.
struct TrainStepOptions {
  double clip = 0;                      // global gradient-norm clipping threshold (0 = off)
  GradMode mode = GradMode::advanced;   // standard: naive clip and no communication overlap
  int threads = 1;                      // scheduler threads of the actor runtime
  int micro_batches = 1;                // per step, on the actor runtime
  int jit_level = 1;                    // 0: eager steps, no actors
  actors::DataParallel data_parallel;   // off unless its communicator is set
  bool measure_gradients = true;        // each step also takes gradient statistics (two extra passes; only --metrics needs them)
  graph::AmpOptions amp;                // mixed precision of the traced step (O0: f32)
  bool loss_scaling = false;            // dynamic loss scaling (graph::GradScaler's defaults)
  TensorParallelStepOptions tensor_parallel;  // when set, the program runs the device's sharded step
                                              // (the optimizer then holds its shards)
};

/// The step the flags ask for: the clip threshold, and threads and micro-batches resolved for a
/// batch of `batch` rows; the gradient mode, JIT level and data parallelism are the caller's.
TrainStepOptions step_options(const RunFlags& flags, std::int64_t batch);

/// One training step of `model` with `optimizer`: on the actor runtime or eagerly.
class TrainStep {
 public:
  /// Compiles the step unless `options.jit_level` is 0 (then each call runs eagerly). With a
  /// communicator in `options.data_parallel`, gradients and the loss are averaged over its ranks
  /// (buckets on the actor runtime, tensor by tensor when eager). With tensor parallelism it
  /// compiles the device's sharded step (traced with its mixed precision, the passes run after the
  /// split) and `optimizer` holds the device's shards.
  TrainStep(graph::TraceableFn loss_fn, const std::vector<graph::InputSpec>& signature, graph::Module& model,
            std::shared_ptr<graph::Optimizer> optimizer, TrainStepOptions options);
  /// Runs one step on `inputs`: the loss and, when measuring, gradient norm and variance (both
  /// before clipping).
  StepOutcome operator()(const std::vector<Tensor>& inputs);
  /// The engine of the actor program (null in eager mode), for programs the app adds (evaluation).
  actors::Engine* engine() const { return engine_.get(); }
  /// JIT level 3: the planned and measured peak memory of the steps (empty otherwise).
  /// With ZeRO-1, the rank's share of the optimizer state (checkpoints gather and load it); null otherwise.
  actors::ZeroState* zero_state() const { return program_ ? program_->zero_state() : nullptr; }
  /// Waits until the last step has written the parameters (ZeRO-1's all-gather overlaps the next
  /// step); before evaluating or saving them.
  void settle() const {
    if (program_) program_->settle();
  }
  /// The dynamic loss scaler, or null without loss scaling (checkpoints save its state).
  graph::GradScaler* loss_scaler() const { return scaler_.get(); }
  std::optional<graph::MemoryPlanReport> memory_report() const {
    return program_ ? program_->memory_report() : std::nullopt;
  }

 private:
  graph::TraceableFn loss_fn_;
  graph::Module& model_;
  std::shared_ptr<graph::Optimizer> optimizer_;
  double clip_;
  actors::DataParallel dp_;
  TensorParallelStepOptions tp_;
  // With --tp, the sums of the group's gradients (the measured norm and variance are the whole model's).
  GradientSums tensor_parallel_sums(const std::map<std::string, Tensor>& shards) const;
  bool measure_;
  std::unique_ptr<actors::Engine> engine_;
  std::unique_ptr<actors::Program> program_;
  std::shared_ptr<graph::GradScaler> scaler_;
};

}  // namespace troupe::apps
