#pragma once
// Pictures of a run (troupe-report, and --report at the end of a training run): one self-contained
// HTML page charting a metrics file written by --metrics (train and validation loss, learning rate,
// gradient norm and variance, step time split into compute and exposed communication, memory) and,
// with a trace written by --trace, each actor's busy timeline and the critical path. Chart.js is
// embedded in the page at build time, and the page fetches nothing.

#include <string>

namespace troupe::apps {

/// What a report is drawn from.
struct ReportSources {
  std::string metrics;  // a file written by --metrics
  std::string trace;    // a Chrome trace written by --trace; "" for none
  std::string name;     // the run's name, the page's title
};

/// The sources `path` names: a metrics file, or a run folder holding one (metrics.csv,
/// metrics.jsonl or metrics.json, else its only .csv or .jsonl file) and, unless `trace` is given,
/// its trace.json when it has one. The name is the folder's, or the file's up to its first dot (its
/// folder's when that is "metrics"). Throws naming the folder when it holds no metrics file, or several.
ReportSources find_report_sources(const std::string& path, const std::string& trace);

/// The page for `sources`: every chart their columns allow (a column an older metrics file lacks is
/// not charted), and the trace's when there is one. Throws naming the file that cannot be read.
std::string report_page(const ReportSources& sources);

/// Writes report_page(sources) to `out`; throws naming `out` when it cannot be written.
void write_report(const ReportSources& sources, const std::string& out);

}  // namespace troupe::apps
