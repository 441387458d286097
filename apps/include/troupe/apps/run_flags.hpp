#pragma once
// The flags every training app has (steps, cadences, outputs, threads, clipping, precision), and
// what they resolve to on this machine.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "troupe/apps/train_loop.hpp"
#include "troupe/graph/amp.hpp"
#include "troupe/graph/lr_schedule.hpp"

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
  double save_every_min = 0;  // also a checkpoint once this many minutes passed since the last (0: off)
  double clip = 0;
  std::string save, resume, metrics, trace;
  std::string report;  // --report: troupe-report's page of the run, written at the end
  int threads = 0, micro_batches = 0;
  AmpFlags amp{"auto", "bf16"};  // O2 where the CPU computes bf16 natively (resolve_amp)
  std::string loss_scale = "auto";             // dynamic loss scaling: auto (with fp16), dynamic, off
  std::string lr_schedule = "constant";        // decay after warm-up: constant, cosine, linear
  std::int64_t warmup_steps = 0;               // linear warm-up from 0 to --lr
  std::int64_t decay_steps = 0;                // the step the decay reaches --min-lr (0: --steps)
  double min_lr = 0;                           // the decay's floor
  int grad_accum = 1;                          // batches per update (gradient accumulation)
  bool gradients_mean = true;                  // average the replicas' gradients (false: sum them)
};

/// Registers RunFlags on `app`, each numeric flag with its range; `steps` and `clip` keep the
/// defaults they hold.
void add_run_flags(CLI::App& app, RunFlags& flags);

/// The cadence and output part of LoopOptions from the flags.
LoopOptions loop_options(const RunFlags& flags);

/// The metrics file: --metrics, or with --report alone the file beside the report that it draws
/// (runs/report.html: runs/report.metrics.csv); "" for neither.
std::string metrics_path(const RunFlags& flags);

/// The learning-rate schedule the flags describe (a decay ending at --decay-steps, or --steps).
graph::LrSchedule lr_schedule(const RunFlags& flags);

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

}  // namespace troupe::apps
