#pragma once
// Reading back a metrics file written by --metrics (metrics.hpp), for troupe-report: CSV or JSON
// lines, told apart by their first character, of any Troupe version (a file's columns are whatever
// it has; older files lack the newer ones).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe::apps {

/// A metrics file read back: each column's values by step.
struct MetricsSeries {
  std::string source;               // the file
  std::vector<std::int64_t> steps;  // ascending, each once: a step recorded twice (a resumed run redid it) keeps its later record
  std::vector<std::string> names;   // the columns besides "step", in the order the file first has them
  std::map<std::string, std::vector<double>> columns;  // one value per step; NaN where that record has none
};

/// Reads `path`; throws troupe::Error naming the file (and the line) when it is missing, holds no
/// steps, or is not a metrics file, saying what to pass instead.
MetricsSeries read_metrics(const std::string& path);

}  // namespace troupe::apps
