// troupe-trace: reads message-flow traces written with --trace (Chrome trace JSON) and summarises
// them: per-actor busy/idle time and message counts, each step's critical path, compute versus
// messaging time, the idle part of the steps. Given several (a pipeline's stages, one trace per
// rank) it summarises each and ends with each one's idle fraction: the stages' bubbles.
// Usage: troupe-trace summary TRACE.json [TRACE.json ...] [--json]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "troupe/actors/trace_summary.hpp"
#include "troupe/apps/cli.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/weights.hpp"
#include "troupe/version.hpp"

int main(int argc, char** argv) {
  const char* usage = "usage: troupe-trace summary TRACE.json [TRACE.json ...] [--json] | --version";
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("troupe-trace %s\n", TROUPE_VERSION);
    return 0;
  }
  if (argc < 3 || std::strcmp(argv[1], "summary") != 0) {
    std::fprintf(stderr, "%s\n", usage);
    return 2;
  }
  bool as_json = false;
  std::vector<std::string> files;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) as_json = true;
    else if (argv[i][0] == '-') {
      std::fprintf(stderr, "troupe-trace: unknown option '%s'; %s\n", argv[i], usage);
      return 2;
    } else files.emplace_back(argv[i]);
  }
  if (files.empty()) {
    std::fprintf(stderr, "troupe-trace: no trace given; %s\n", usage);
    return 2;
  }
  return troupe::apps::run_guarded("troupe-trace", [&] {
    std::vector<troupe::actors::TraceSummary> summaries;
    for (const std::string& file : files) {
      troupe::models::require_file(file, "give the trace file written by --trace");
      std::ifstream in(file);
      TROUPE_CHECK(in.good(), io, "cannot open '", file, "'");
      std::stringstream buf;
      buf << in.rdbuf();
      summaries.push_back(troupe::actors::summarize_trace(buf.str(), file));
    }
    if (files.size() == 1) {
      std::cout << (as_json ? troupe::actors::summary_json(summaries[0]) + "\n" : troupe::actors::format_summary(summaries[0]));
      return 0;
    }
    if (as_json) {
      nlohmann::json all = nlohmann::json::array();
      for (std::size_t k = 0; k < files.size(); ++k) {
        nlohmann::json one = nlohmann::json::parse(troupe::actors::summary_json(summaries[k]));
        one["source"] = files[k];
        all.push_back(std::move(one));
      }
      std::cout << all.dump(2) << "\n";
      return 0;
    }
    for (std::size_t k = 0; k < files.size(); ++k)
      std::cout << "== " << files[k] << " ==\n" << troupe::actors::format_summary(summaries[k]) << "\n";
    std::cout << "idle fraction of each trace (a pipeline stage's bubble):\n";
    for (std::size_t k = 0; k < files.size(); ++k) std::printf("  %-40s %5.1f%%\n", files[k].c_str(), 100.0 * summaries[k].idle_fraction);
    return 0;
  });
}
