#include "troupe/apps/metrics.hpp"

#include <cstdio>

#include "troupe/kernels/error.hpp"

namespace troupe::apps {

MetricsWriter::MetricsWriter(const std::string& path, bool append, const std::string& eval_name) : eval_name_(eval_name) {
  if (path.empty()) return;
  enabled_ = true;
  csv_ = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  const bool had_content = append && std::ifstream(path).peek() != std::ifstream::traits_type::eof();
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  TROUPE_CHECK(out_.good(), io, "cannot write the metrics file '", path, "'; check the folder exists (--metrics FILE)");
  if (csv_ && !had_content) out_ << "step,loss,grad_norm,grad_variance,peak_bytes,current_bytes,step_ms,loss_scale,skipped," << eval_name_ << "\n";
}

void MetricsWriter::write(const StepMetrics& m) {
  if (!enabled_) return;
  char buf[512];
  const std::string eval = m.evaluated ? std::to_string(m.eval) : "";
  if (csv_) {
    std::snprintf(buf, sizeof buf, "%lld,%.6g,%.6g,%.6g,%zu,%zu,%.3f,%.9g,%d,%s\n", static_cast<long long>(m.step), m.loss,
                  m.grad_norm, m.grad_variance, m.peak_bytes, m.current_bytes, m.step_ms, m.loss_scale,
                  m.skipped ? 1 : 0, eval.c_str());
  } else {
    std::snprintf(buf, sizeof buf,
                  "{\"step\":%lld,\"loss\":%.6g,\"grad_norm\":%.6g,\"grad_variance\":%.6g,\"peak_bytes\":%zu,"
                  "\"current_bytes\":%zu,\"step_ms\":%.3f,\"loss_scale\":%.9g,\"skipped\":%s%s}\n",
                  static_cast<long long>(m.step), m.loss, m.grad_norm, m.grad_variance, m.peak_bytes, m.current_bytes,
                  m.step_ms, m.loss_scale, m.skipped ? "true" : "false", m.evaluated ? (",\"" + eval_name_ + "\":" + eval).c_str() : "");
  }
  out_ << buf;
  out_.flush();
}

}  // namespace troupe::apps
