#pragma once
// Per-step monitoring (--metrics FILE): one record per step with the loss, the learning rate, the
// gradient's global norm and its variance across parameters, allocator bytes (peak and current, to
// see memory fluctuate), the step time and the gradient communication in it. A file ending in .csv
// gets CSV, anything else JSON lines; metrics_reader.hpp reads both back.

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "troupe/kernels/tensor.hpp"

namespace troupe::apps {

/// What one step reports.
struct StepMetrics {
  std::int64_t step = 0;
  double loss = 0;
  double lr = 0;               // the learning rate the update used
  double grad_norm = 0;        // global L2 norm before clipping
  double grad_variance = 0;    // variance of all gradient elements taken together
  std::size_t peak_bytes = 0, current_bytes = 0;
  double step_ms = 0;
  double comm_ms = 0;          // data parallel: gradient communication during the step
  double exposed_comm_ms = 0;  // the part of it no compute hid (the step waited for it)
  std::uint64_t comm_bytes = 0;  // data parallel: bytes this rank sent for it
  double loss_scale = 0;       // loss scaling: the step's scale (0: none)
  bool skipped = false;        // loss scaling: the update was skipped
  bool evaluated = false;      // a held-out evaluation ran after this step
  double eval = 0;             // its result (validation loss, PSNR, ...)
};

/// Appends StepMetrics records to a file.
class MetricsWriter {
 public:
  /// Opens `path` (truncated, or appended to when resuming); throws naming it when it cannot be
  /// written. An empty path writes nothing. `eval_name` names the evaluation column. A CSV file
  /// appended to keeps its own header's columns, so a run resumed into a file an older Troupe
  /// began stays readable (the columns it lacks are left out).
  MetricsWriter(const std::string& path, bool append, const std::string& eval_name);
  /// Writes one record and flushes it, so a crashed run keeps its metrics.
  void write(const StepMetrics& m);

 private:
  std::ofstream out_;
  std::string eval_name_;
  std::vector<std::string> columns_;  // CSV: the header's
  bool csv_ = false, enabled_ = false;
};

}  // namespace troupe::apps
