// troupe-trace: reads a message-flow trace written with --trace (Chrome trace JSON) and summarises
// it: per-actor busy/idle time and message counts, each step's critical path, compute versus
// messaging time.  Usage: troupe-trace summary TRACE.json [--json]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "troupe/actors/trace_summary.hpp"
#include "troupe/kernels/error.hpp"

int main(int argc, char** argv) {
  const char* usage = "usage: troupe-trace summary TRACE.json [--json]\n";
  if (argc < 3 || std::strcmp(argv[1], "summary") != 0) {
    std::fputs(usage, stderr);
    return 2;
  }
  bool as_json = false;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) as_json = true;
    else {
      std::fprintf(stderr, "troupe-trace: unknown option '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "troupe-trace: cannot open %s\n", argv[2]);
    return 1;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    const auto summary = troupe::actors::summarize_trace(buf.str(), argv[2]);
    std::cout << (as_json ? troupe::actors::summary_json(summary) + "\n" : troupe::actors::format_summary(summary));
  } catch (const troupe::Error& e) {
    std::fprintf(stderr, "troupe-trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
