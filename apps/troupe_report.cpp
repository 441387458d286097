// troupe-report: pictures of a run. Reads a metrics file written by --metrics (or the folder that
// holds it) and optionally a message-flow trace written by --trace, and writes one self-contained
// HTML page of charts (troupe/apps/report.hpp).
//   Usage: troupe-report RUN_DIR_OR_METRICS [--trace TRACE.json] -o report.html
#include <cstdio>
#include <string>

#include "troupe/apps/cli.hpp"
#include "troupe/apps/report.hpp"

int main(int argc, char** argv) {
  CLI::App app{"troupe-report: one self-contained HTML page charting a run's metrics (--metrics) and, with a trace "
               "(--trace), each actor's busy timeline and the critical path"};
  std::string input, trace, output;
  app.add_option("run", input, "a metrics file (CSV or JSON lines), or a run folder holding metrics.csv, metrics.jsonl or "
                 "metrics.json (and trace.json, drawn too)")->required();
  app.add_option("--trace", trace, "a Chrome trace written by --trace (default: the run folder's trace.json, if any)");
  app.add_option("-o,--output", output, "the HTML page to write")->required();
  return troupe::apps::run_cli(app, argc, argv, "troupe-report", [&] {
    const troupe::apps::ReportSources sources = troupe::apps::find_report_sources(input, trace);
    troupe::apps::write_report(sources, output);
    std::printf("troupe-report: %s written (metrics %s%s%s)\n", output.c_str(), sources.metrics.c_str(),
                sources.trace.empty() ? "" : ", trace ", sources.trace.c_str());
    return 0;
  });
}
