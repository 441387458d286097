// troupe-trace: reads a message-flow trace written with --trace (Chrome trace JSON) and summarises
// it: per-actor busy/idle time and message counts, each step's critical path, compute versus
// messaging time.  Usage: troupe-trace summary TRACE.json [--json]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "troupe/actors/trace_summary.hpp"
#include "troupe/apps/cli.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/weights.hpp"
#include "troupe/version.hpp"

int main(int argc, char** argv) {
  const char* usage = "usage: troupe-trace summary TRACE.json [--json] | --version";
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("troupe-trace %s\n", TROUPE_VERSION);
    return 0;
  }
  if (argc < 3 || std::strcmp(argv[1], "summary") != 0) {
    std::fprintf(stderr, "%s\n", usage);
    return 2;
  }
  bool as_json = false;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) as_json = true;
    else {
      std::fprintf(stderr, "troupe-trace: unknown option '%s'; %s\n", argv[i], usage);
      return 2;
    }
  }
  return troupe::apps::run_guarded("troupe-trace", [&] {
    troupe::models::require_file(argv[2], "give the trace file written by --trace");
    std::ifstream in(argv[2]);
    TROUPE_CHECK(in.good(), io, "cannot open '", argv[2], "'");
    std::stringstream buf;
    buf << in.rdbuf();
    const auto summary = troupe::actors::summarize_trace(buf.str(), argv[2]);
    std::cout << (as_json ? troupe::actors::summary_json(summary) + "\n" : troupe::actors::format_summary(summary));
    return 0;
  });
}
