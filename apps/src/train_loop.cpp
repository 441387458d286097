#include "troupe/apps/train_loop.hpp"

#include <chrono>
#include <cstdio>
#include <cmath>
#include <deque>
#include <fstream>
#include <numeric>

#include "troupe/actors/tracer.hpp"
#include "troupe/apps/metrics.hpp"
#include "troupe/apps/report.hpp"
#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::apps {

std::optional<std::string> communication_advice(double exposed_ms, double step_ms) {
  if (step_ms <= 0 || exposed_ms <= 0.15 * step_ms) return std::nullopt;
  char buf[320];
  std::snprintf(buf, sizeof buf, "communication that no compute hides takes %.0f%% of a step (%.1f of %.1f ms); try "
                "larger or smaller gradient buckets (--comm-fusion-mb), the overlapped gradient path (unset "
                "GRAD_MODE=standard), more micro-batches, or fewer replicas on this link",
                100 * exposed_ms / step_ms, exposed_ms, step_ms);
  return std::string(buf);
}

LoopSummary run_training_loop(const LoopOptions& o, const LoopHooks& hooks) {
  TROUPE_CHECK(o.steps > o.start_step, invalid_argument, "nothing to do: the run is at step ", o.start_step,
               " and --steps is ", o.steps, "; raise --steps to continue");
  // Refused now rather than after the training (appending creates it and keeps what is there).
  TROUPE_CHECK(o.report_path.empty() || std::ofstream(o.report_path, std::ios::app).good(), io, "cannot write the report '",
               o.report_path, "'; check the folder exists (--report FILE)");
  MetricsWriter metrics(o.metrics_path, /*append=*/o.start_step > 0, o.eval_name);
  Progress progress(o.steps, o.unit, o.log_every);
  actors::Tracer& tracer = actors::Tracer::instance();
  LoopSummary summary;
  std::deque<double> recent;
  double total_ms = 0, warm_ms = 0;
  constexpr std::int64_t kAdviseAfter = 4;  // steps: the first warms up, three give the means
  auto last_save = std::chrono::steady_clock::now();
  for (std::int64_t step = o.start_step + 1; step <= o.steps; ++step) {
    const bool last = step == o.steps;
    if (last && !o.trace_path.empty()) tracer.enable(true);
    const auto t0 = std::chrono::steady_clock::now();
    const actors::StepReport out = hooks.step();
    const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    if (last && !o.trace_path.empty()) tracer.enable(false);
    // A step loss scaling skipped may have overflowed its forward too; the scaler handles it.
    TROUPE_CHECK(std::isfinite(out.loss) || out.skipped, runtime, "the loss became ", out.loss, " at step ", step,
                 "; training diverged: lower --lr or clip harder (--clip)");
    ++summary.steps;
    summary.skipped_steps += out.skipped ? 1 : 0;
    total_ms += ms;
    if (summary.steps > 1) {
      warm_ms += ms;
      summary.comm_ms += out.comm_ms;
      summary.exposed_comm_ms += out.exposed_comm_ms;
      summary.comm_bytes += static_cast<double>(out.comm_bytes);
    }
    if (summary.steps > 1 && (summary.steps == kAdviseAfter || (last && summary.steps < kAdviseAfter)))
      if (const auto advice = communication_advice(summary.exposed_comm_ms / static_cast<double>(summary.steps - 1),
                                                   warm_ms / static_cast<double>(summary.steps - 1)))
        std::fprintf(stderr, "%s: warning: %s\n", o.app.c_str(), advice->c_str());
    if (std::isfinite(out.loss)) recent.push_back(out.loss);
    if (recent.size() > 10) recent.pop_front();
    progress.step(step, out.loss, o.items_per_step, ms / 1e3);

    StepMetrics m;
    m.step = step;
    m.loss = out.loss;
    m.lr = out.lr;
    m.grad_norm = out.grad_norm;
    m.grad_variance = out.grad_variance;
    const AllocatorStats st = cpu_allocator().stats();
    m.peak_bytes = st.peak_bytes;
    summary.step_peak_bytes = st.peak_bytes;
    m.current_bytes = st.current_bytes;
    m.step_ms = ms;
    m.comm_ms = out.comm_ms;
    m.exposed_comm_ms = out.exposed_comm_ms;
    m.comm_bytes = out.comm_bytes;
    m.loss_scale = out.loss_scale;
    m.skipped = out.skipped;
    if ((o.eval_every > 0 && step % o.eval_every == 0) || last) {
      summary.eval = hooks.evaluate();
      m.evaluated = true;
      m.eval = summary.eval;
      char buf[128];
      std::snprintf(buf, sizeof buf, "step %lld: %s %.4f", static_cast<long long>(step), o.eval_name.c_str(), summary.eval);
      progress.line(buf);
    }
    metrics.write(m);
    // A save on the clock when any rank's says it is time, so that every rank (those that take no
    // part in saving too) counts the same saves.
    bool timed = false;
    if (o.save_every_min > 0 && !last && (hooks.save || hooks.any_rank)) {
      const bool due = std::chrono::steady_clock::now() - last_save >= std::chrono::duration<double>(o.save_every_min * 60);
      timed = hooks.any_rank ? hooks.any_rank(due) : due;
    }
    if ((o.save_every > 0 && step % o.save_every == 0) || last || timed) {
      if (hooks.save && hooks.save(step)) progress.line("step " + std::to_string(step) + ": checkpoint saved");
      last_save = std::chrono::steady_clock::now();
    }
  }
  progress.finish();
  if (!o.trace_path.empty()) {
    tracer.write_chrome_json(o.trace_path);
    std::printf("message flow of the last step written to %s (troupe-trace summary %s)\n", o.trace_path.c_str(),
                o.trace_path.c_str());
  }
  if (!o.report_path.empty()) {
    write_report(find_report_sources(o.metrics_path, o.trace_path), o.report_path);
    std::printf("report of the run written to %s (troupe-report)\n", o.report_path.c_str());
  }
  if (!recent.empty()) summary.train_loss = std::accumulate(recent.begin(), recent.end(), 0.0) / static_cast<double>(recent.size());
  summary.ms_per_step = summary.steps > 1 ? warm_ms / static_cast<double>(summary.steps - 1) : total_ms;
  if (summary.steps > 1) {
    summary.comm_ms /= static_cast<double>(summary.steps - 1);
    summary.exposed_comm_ms /= static_cast<double>(summary.steps - 1);
    summary.comm_bytes /= static_cast<double>(summary.steps - 1);
  }
  summary.items_per_s = summary.ms_per_step > 0 ? o.items_per_step / (summary.ms_per_step / 1e3) : 0;
  return summary;
}

}  // namespace troupe::apps
