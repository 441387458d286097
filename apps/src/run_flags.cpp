#include "troupe/apps/run_flags.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "troupe/apps/cli.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::apps {

void add_run_flags(CLI::App& app, RunFlags& f) {
  constexpr double kMany = 1e12;  // more steps than any run takes
  app.add_option("--steps", f.steps, "total training steps (a resumed run continues up to this)")
      ->capture_default_str()->check(in_range(1, kMany));
  app.add_option("--clip", f.clip, "global gradient-norm clipping threshold (0 = off)")
      ->capture_default_str()->check(in_range(0, 1e6, "0 = off"));
  app.add_option("--eval-every", f.eval_every, "held-out evaluation every K steps (and at the end)")
      ->capture_default_str()->check(in_range(0, kMany, "0 = only at the end"));
  app.add_option("--save", f.save, "checkpoint folder, written every --save-every steps and at the end");
  app.add_option("--save-every", f.save_every, "checkpoint cadence in steps")
      ->capture_default_str()->check(in_range(0, kMany, "0 = only at the end"));
  app.add_option("--save-every-min", f.save_every_min,
                 "also checkpoint once this many minutes passed since the last save (the ranks agree on the step)")
      ->capture_default_str()->check(in_range(0, 1e6, "minutes; 0 = off"));
  app.add_option("--resume", f.resume, "continue the run saved in this checkpoint folder");
  app.add_option("--metrics", f.metrics, "per-step metrics file (.csv, otherwise JSON lines)");
  app.add_option("--trace", f.trace, "write the last step's message flow (Chrome trace JSON)");
  app.add_option("--report", f.report, "at the end, write an HTML page charting the run's metrics (and its --trace); "
                 "without --metrics they go beside it, REPORT.metrics.csv");
  app.add_option("--log-every", f.log_every, "plain log line cadence when stdout is not a terminal")
      ->capture_default_str()->check(in_range(1, kMany));
  app.add_option("--threads", f.threads, "scheduler threads (0 = all cores)")
      ->capture_default_str()->check(in_range(0, 4096, "0 = all cores"));
  add_amp_flags(app, f.amp);
  app.add_option("--loss-scale", f.loss_scale,
                 "dynamic loss scaling: auto (on with --amp-dtype fp16), dynamic, or off")
      ->capture_default_str()->check(CLI::IsMember({"auto", "dynamic", "off"}));
  app.add_option("--micro-batches", f.micro_batches,
                 "micro-batches per step, uneven when they do not divide the batch (0 = 2 on several cores, else 1)")
      ->capture_default_str()->check(in_range(0, 65536, "0 = automatic"));
  app.add_option("--lr-schedule", f.lr_schedule, "the learning rate after warm-up: constant, or a cosine or linear decay to --min-lr")
      ->capture_default_str()->check(CLI::IsMember({"constant", "cosine", "linear"}));
  app.add_option("--warmup-steps", f.warmup_steps, "steps over which the learning rate rises linearly from 0 to --lr")
      ->capture_default_str()->check(in_range(0, kMany));
  app.add_option("--decay-steps", f.decay_steps, "the step at which the decay reaches --min-lr and stays")
      ->capture_default_str()->check(in_range(0, kMany, "0 = --steps"));
  app.add_option("--min-lr", f.min_lr, "the floor of the learning rate's decay")
      ->capture_default_str()->check(in_range(0, 10));
  app.add_option("--grad-accum", f.grad_accum, "batches whose gradients add up into each update (gradient accumulation)")
      ->capture_default_str()->check(in_range(1, 65536));
  app.add_option("--gradients-mean", f.gradients_mean,
                 "average the data-parallel replicas' gradients (false: sum them, as with a summed loss)")
      ->capture_default_str();
}

graph::LrSchedule lr_schedule(const RunFlags& f) {
  graph::LrSchedule s;
  s.decay = graph::parse_lr_decay(f.lr_schedule);
  s.warmup_steps = f.warmup_steps;
  s.decay_steps = f.decay_steps > 0 ? f.decay_steps : f.steps;
  s.min_lr = f.min_lr;
  return s;
}

LoopOptions loop_options(const RunFlags& f) {
  LoopOptions o;
  o.steps = f.steps;
  o.eval_every = f.eval_every;
  o.save_every = f.save_every;
  o.save_every_min = f.save_every_min;
  o.log_every = f.log_every;
  o.metrics_path = metrics_path(f);
  o.trace_path = f.trace;
  o.report_path = f.report;
  return o;
}

std::string metrics_path(const RunFlags& f) {
  if (!f.metrics.empty() || f.report.empty()) return f.metrics;
  return std::filesystem::path(f.report).replace_extension(".metrics.csv").string();
}

int resolve_threads(const RunFlags& f) {
  return f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int resolve_micro_batches(const RunFlags& f, int threads, std::int64_t batch) {
  TROUPE_CHECK(f.micro_batches >= 0, invalid_argument, "--micro-batches must be >= 0, got ", f.micro_batches);
  const std::int64_t wanted = f.micro_batches > 0 ? f.micro_batches : (threads > 1 ? 2 : 1);
  // The program splits an uneven batch itself (5 rows in 3: 2 + 2 + 1); what it cannot do is give
  // every micro-batch a row when there are fewer rows, so the count the run reports is at most the batch.
  return static_cast<int>(std::max<std::int64_t>(1, std::min(wanted, batch)));
}

void add_amp_flags(CLI::App& app, AmpFlags& f) {
  app.add_option("--amp", f.level,
                 "mixed precision: auto (O2 where the CPU computes --amp-dtype natively, else O0), O0 (f32), O1 "
                 "(matrix products and convolutions in --amp-dtype, the rest in f32), O2 (activations in --amp-dtype "
                 "too, but losses, softmax and normalisation) or O3 (everything in --amp-dtype, statistics in f32)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->check(CLI::IsMember({"auto", "O0", "O1", "O2", "O3"}));
  app.add_option("--amp-dtype", f.dtype, "the low-precision type of --amp: bf16 or fp16")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->check(CLI::IsMember({"bf16", "fp16"}));
}

graph::AmpOptions resolve_amp(const AmpFlags& flags, int jit_level, const std::string& app) {
  const DType dtype = graph::parse_amp_dtype(flags.dtype);
  if (flags.level == "auto")
    return {jit_level > 0 && kernels::native_low_precision(dtype) ? graph::AmpLevel::O2 : graph::AmpLevel::O0, dtype};
  graph::AmpOptions amp{graph::parse_amp_level(flags.level), dtype};
  if (amp.level == graph::AmpLevel::O0) return amp;
  TROUPE_CHECK(jit_level > 0, invalid_argument, "--amp ", flags.level, " rewrites the traced graph and JIT_LEVEL=0 ",
               "runs eagerly; use JIT_LEVEL=1 or more, or --amp O0");
  if (kernels::native_low_precision(amp.dtype)) return amp;
  TROUPE_CHECK(amp.dtype == DType::bf16, unsupported, "--amp-dtype fp16: this CPU (", kernels::cpu_isa(),
               ") or this oneDNN has no f16 matrix products; use --amp-dtype bf16");
  std::fprintf(stderr, "%s: warning: this CPU (%s) has no native bf16 (AVX512-BF16 or AMX): --amp %s would be slower "
               "than f32, so the run stays at O0\n", app.c_str(), kernels::cpu_isa(), flags.level.c_str());
  amp.level = graph::AmpLevel::O0;
  return amp;
}

bool resolve_loss_scaling(const RunFlags& flags, const graph::AmpOptions& amp, int jit_level) {
  TROUPE_CHECK(flags.loss_scale != "dynamic" || amp.level != graph::AmpLevel::O3, invalid_argument,
               "--amp O3 trains with a loss scale of 1; use --loss-scale auto or off, or --amp O2 for dynamic scaling");
  const bool on = flags.loss_scale == "dynamic" || (flags.loss_scale == "auto" && amp.level != graph::AmpLevel::O0 &&
                                                    amp.level != graph::AmpLevel::O3 && amp.dtype == DType::f16);
  TROUPE_CHECK(!on || jit_level > 0, invalid_argument, "--loss-scale dynamic needs the actor runtime, and JIT_LEVEL=0 ",
               "runs eagerly; use JIT_LEVEL=1 or more, or --loss-scale off");
  return on;
}

}  // namespace troupe::apps
