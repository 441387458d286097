#include "troupe/apps/metrics.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include "troupe/kernels/error.hpp"

namespace troupe::apps {

namespace {

// `v` printed with `format`; a NaN or infinite value is "nan"/"inf" in CSV (as strtod reads them)
// and null in JSON, which has no such numbers.
std::string number(const char* format, double v, bool csv) {
  if (!csv && !std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// One record's fields by column name, in the order this version writes them (the evaluation last:
// it is empty on most steps); the evaluation only on steps that ran it.
std::vector<std::pair<std::string, std::string>> fields(const StepMetrics& m, const std::string& eval_name, bool csv) {
  std::vector<std::pair<std::string, std::string>> f = {
      {"step", std::to_string(m.step)},
      {"loss", number("%.6g", m.loss, csv)},
      {"lr", number("%.6g", m.lr, csv)},
      {"grad_norm", number("%.6g", m.grad_norm, csv)},
      {"grad_variance", number("%.6g", m.grad_variance, csv)},
      {"peak_bytes", std::to_string(m.peak_bytes)},
      {"current_bytes", std::to_string(m.current_bytes)},
      {"step_ms", number("%.3f", m.step_ms, csv)},
      {"comm_ms", number("%.3f", m.comm_ms, csv)},
      {"exposed_comm_ms", number("%.3f", m.exposed_comm_ms, csv)},
      {"comm_bytes", std::to_string(m.comm_bytes)},
      {"loss_scale", number("%.9g", m.loss_scale, csv)},
      {"skipped", csv ? (m.skipped ? "1" : "0") : (m.skipped ? "true" : "false")}};
  if (m.evaluated) f.emplace_back(eval_name, number("%f", m.eval, csv));
  return f;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool append, const std::string& eval_name) : eval_name_(eval_name) {
  if (path.empty()) return;
  enabled_ = true;
  csv_ = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  std::string header;
  if (append) std::getline(std::ifstream(path), header);
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  TROUPE_CHECK(out_.good(), io, "cannot write the metrics file '", path, "'; check the folder exists (--metrics FILE)");
  if (!csv_) return;
  if (!header.empty()) {
    std::istringstream names(header);
    for (std::string name; std::getline(names, name, ',');) columns_.push_back(name);
    return;
  }
  StepMetrics evaluated;
  evaluated.evaluated = true;
  for (const auto& [name, value] : fields(evaluated, eval_name_, true)) columns_.push_back(name);
  for (std::size_t i = 0; i < columns_.size(); ++i) out_ << (i ? "," : "") << columns_[i];
  out_ << "\n";
}

void MetricsWriter::write(const StepMetrics& m) {
  if (!enabled_) return;
  const auto f = fields(m, eval_name_, csv_);
  std::string line;
  if (csv_) {
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i) line += ',';
      for (const auto& [name, value] : f)
        if (name == columns_[i]) line += value;
    }
  } else {
    for (const auto& [name, value] : f) line += (line.empty() ? "{\"" : ",\"") + name + "\":" + value;
    line += "}";
  }
  out_ << line << "\n";
  out_.flush();
}

}  // namespace troupe::apps
