#pragma once
// The training run troupe-gpt and troupe-sr share around the loop: GRAD_MODE and JIT_LEVEL, the
// checkpoint of --resume (whose settings replace the flags), the save folder check, the starting
// weights, the parallel training (actors::ParallelTraining, from the flags), the start-up lines,
// the loop's hooks, checkpoints and the final JSON line. An app settles its own settings between the
// two halves (TrainingRun's constructor, then train) and gives what is its own as a
// TrainingSetup (values) and TrainingParts (functions), as the loop takes LoopOptions and LoopHooks.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/actors/parallel_training.hpp"
#include "troupe/apps/grad_mode.hpp"
#include "troupe/apps/parallel_flags.hpp"
#include "troupe/apps/resume.hpp"
#include "troupe/apps/train_loop.hpp"
#include "troupe/apps/run_flags.hpp"
#include "troupe/graph/module.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/models/checkpoint.hpp"

namespace troupe::apps {

/// The app's loss run forward only on held-out inputs, for its evaluation: a forward-only actor
/// program when TrainingSetup::forward_program asks for one, otherwise eagerly.
using ForwardLoss = std::function<double(const std::vector<Tensor>& inputs)>;

/// What an app settled for its run (after taking a resumed checkpoint's settings).
struct TrainingSetup {
  std::int64_t batch = 0;                   // rows per step on each replica; with a searched mesh, the whole step's
  double lr = 0, weight_decay = 0;          // AdamW (no weight decay: Adam)
  std::uint64_t seed = 0;                   // what dropout draws from (the app's --seed)
  std::vector<graph::InputSpec> signature;  // of TrainingParts::loss
  ParallelFlags parallel;                   // --dp, --tp, --zero, the planner's, strategy files
  /// The model's placement along tp (troupe-gpt: Megatron's GPT placement); without one, --tp and
  /// a searched mesh are refused.
  plan::PlacementPolicy placement;
  /// A launched job of several processes has its mesh chosen by the planner (the app was given
  /// neither --dp nor --tp); `batch` is then the global batch, which the chosen dp splits.
  bool search_mesh = false;
  std::string grad_mode_note;               // appended to "GRAD_MODE=<mode>" at start
  std::string weights_advice;               // ends the error when --load-weights does not fit
  bool forward_program = false;             // compile a forward-only program for ForwardLoss
  double items_per_step = 0;                // tokens or images per step of `batch` rows, for the throughput
  std::string unit = "items/s";
  std::string eval_name = "val_loss";       // the evaluation's column and log name
};

/// The app's parts. The run calls load_data and build_model, restores the starting point
/// (weight_names or set_data_position), prints describe's lines, traces loss into the step, runs
/// the loop on next_batch, evaluate and (for checkpoints) store_settings and data_position, and
/// ends with summary_fields. The app owns its data and model; the run only refers to them.
struct TrainingParts {
  /// Loads the data for batches of `batch` rows per rank; with data parallelism every rank draws
  /// the batches of all `ranks`.
  std::function<void(int ranks, std::int64_t batch)> load_data;
  /// Builds the model (from the app's seed) and returns it; it must outlive the run.
  std::function<graph::Module&()> build_model;
  /// Maps the names of --load-weights tensors to the model's (troupe-gpt: nanoGPT's); empty: same.
  std::function<std::map<std::string, Tensor>(const std::map<std::string, Tensor>&)> weight_names;
  /// The data's position (batches drawn so far), saved in checkpoints and restored on resume.
  std::function<std::uint64_t()> data_position;
  std::function<void(std::uint64_t position)> set_data_position;
  /// The start-up lines about the model and the data, each printed after "<app>: ".
  std::function<std::vector<std::string>()> describe;
  /// The loss of one batch, traced with the setup's signature into the training step.
  graph::TraceableFn loss;
  /// The model's split into pipeline stages (troupe-gpt: its blocks); without one, --pp is refused.
  plan::StagePolicy stages;
  /// The next batch (with data parallelism, all ranks' rows: each rank keeps its own).
  std::function<std::vector<Tensor>()> next_batch;
  /// The held-out score the loop reports as eval_name.
  std::function<double(const ForwardLoss& loss)> evaluate;
  /// Writes the settings a resumed run takes back (model shape, batch, seed, data) into a
  /// checkpoint's state; the run adds "app", "step" and "data_position".
  std::function<void(models::CheckpointState& state)> store_settings;
  /// The final JSON line's fields from "train_loss" to the throughput, with the app's precisions.
  std::function<std::string(const LoopSummary& summary)> summary_fields;
};

/// A training run of the app `name` ("troupe-gpt"): its messages, checkpoints and JSON line.
class TrainingRun {
 public:
  /// Reads GRAD_MODE and JIT_LEVEL, refuses --resume with --load-weights, and opens the
  /// --resume checkpoint (written by `name`). `app` holds the parsed flags, --lr among them (a
  /// resumed run keeps the checkpoint's learning rate unless --lr was given).
  TrainingRun(CLI::App& app, std::string name, RunFlags flags, std::string load_weights);
  TrainingRun(const TrainingRun&) = delete;  // settings_ refers to resumed_
  TrainingRun& operator=(const TrainingRun&) = delete;

  /// The gradient path GRAD_MODE chose.
  GradMode mode() const { return mode_; }
  /// The checkpoint being resumed, or null for a fresh run. Its settings decide the model, the
  /// data and the batch: the app takes them through settings() before train.
  const models::Checkpoint* resumed() const { return resumed_ ? &*resumed_ : nullptr; }
  /// Reconciles the flags with the resumed checkpoint (only when resumed() is set).
  ResumeSettings& settings() { return *settings_; }
  /// The resumed checkpoint's state.json, for errors about its settings ("" for a fresh run).
  std::string state_file() const { return resumed_ ? resumed_->state.source : ""; }

  /// Trains from step 1, or from the resumed step, up to --steps and prints the final JSON line;
  /// returns the exit code.
  int train(const TrainingSetup& setup, const TrainingParts& parts);

 private:
  /// Takes the resumed checkpoint's learning-rate schedule, its peak and its accumulation count.
  void resume_schedule(TrainingSetup& setup);
  /// The parallel training's settings from the flags, GRAD_MODE and JIT_LEVEL.
  actors::ParallelConfig parallel_config(const TrainingSetup& setup, const actors::Job& job) const;
  /// Loads the resumed checkpoint's weights or the --load-weights file into `model`; returns the
  /// step the run continues after (0 when fresh).
  std::int64_t restore_weights(graph::Module& model, const TrainingSetup& setup, const TrainingParts& parts);
  /// Restores the resumed checkpoint's data position, optimizer state and loss-scaler state.
  void restore_state(actors::ParallelTraining& training, const TrainingSetup& setup, const TrainingParts& parts);
  /// The start-up lines: the app's, then the gradient path, resuming and the parallel layout.
  void announce(const TrainingSetup& setup, const TrainingParts& parts, const actors::ParallelConfig& config,
                const actors::ParallelTraining& training, std::int64_t start_step) const;

  std::string name_;
  RunFlags flags_;
  std::string load_weights_;
  GradMode mode_;
  int jit_;
  std::optional<models::Checkpoint> resumed_;
  bool restarted_ = false;  // troupe-launch restarted the job and it resumes from its --save folder
  std::optional<ResumeSettings> settings_;
};

}  // namespace troupe::apps
