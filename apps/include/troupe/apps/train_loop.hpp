#pragma once
// The training loop troupe-gpt and troupe-sr share: runs the app's step function, times it, draws
// progress, writes per-step metrics, evaluates and checkpoints every K steps, every M minutes and
// at the end, traces
// the last step's message flow and writes the report page when asked, and stops with a clear error
// when the loss diverges.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "troupe/actors/step_report.hpp"
#include "troupe/apps/progress.hpp"

namespace troupe::apps {

/// Cadence and outputs of the loop.
struct LoopOptions {
  std::int64_t start_step = 0;  // steps already done (resume)
  std::int64_t steps = 0;       // total steps of the run
  std::int64_t eval_every = 0;  // 0: only at the end
  std::int64_t save_every = 0;  // 0: only at the end (when save is set)
  double save_every_min = 0;    // also save once this many minutes passed since the last save (0: off)
  std::int64_t log_every = 10;
  double items_per_step = 0;    // tokens or images, for the throughput
  std::string unit = "items/s";
  std::string metrics_path;     // --metrics
  std::string trace_path;       // --trace: the last step's message flow
  std::string report_path;      // --report: the page of charts drawn at the end from metrics_path (and trace_path)
  std::string eval_name = "val_loss";
  std::string app = "troupe";   // names the loop's warnings ("troupe-gpt: warning: ...")
};

/// The app's parts: one step, a held-out evaluation, a checkpoint save (may be empty).
struct LoopHooks {
  std::function<actors::StepReport()> step;
  std::function<double()> evaluate;
  std::function<bool(std::int64_t step)> save;  // true when this process wrote the checkpoint
  /// Whether any rank says true (a collective): the ranks' agreement on a checkpoint their clocks
  /// call for. Empty: this process alone decides.
  std::function<bool(bool mine)> any_rank;
};

/// What the final JSON line reports.
struct LoopSummary {
  std::int64_t steps = 0;     // steps run by this invocation
  double train_loss = 0;      // mean loss of the last (up to) 10 steps
  double eval = 0;            // last evaluation
  double ms_per_step = 0;     // mean step time, the first step (warm-up) excluded when there are more
  double items_per_s = 0;
  double comm_ms = 0, exposed_comm_ms = 0;  // means per step, warm-up excluded like ms_per_step
  double comm_bytes = 0;                    // bytes this rank sent per step (mean, warm-up excluded)
  std::int64_t skipped_steps = 0;           // loss scaling: steps whose update an Inf or NaN gradient skipped
  std::size_t step_peak_bytes = 0;          // the allocator's peak through the last step, before its evaluation
};

/// The warning for a run whose communication that no compute hides (`exposed_ms` per step) takes
/// more than 15% of its steps (`step_ms`), with the measured share and what to try; else nothing.
std::optional<std::string> communication_advice(double exposed_ms, double step_ms);

/// Runs steps start_step + 1 .. steps; after the first warm steps (the fourth step, or the last
/// of a shorter run) it warns once on stderr when communication_advice has something to say.
LoopSummary run_training_loop(const LoopOptions& options, const LoopHooks& hooks);

}  // namespace troupe::apps
