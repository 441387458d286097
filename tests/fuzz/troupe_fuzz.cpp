// The long fuzz runs: troupe_fuzz [--runs N] [--seed S] [--scratch DIR] [--outcomes] [target ...] runs each
// target (all by default) and prints one JSON line per target with its counts (--outcomes: and
// the distinct outcomes, refusal messages with numbers and names blanked); exits 1 when any
// input produced a defect, printing it. Meant to run under ASan+UBSan (scripts/fuzz.sh), where a
// memory error aborts the run with the sanitizer's report.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/fuzz_driver.hpp"

using namespace troupe::fuzz;

int main(int argc, char** argv) {
  std::uint64_t runs = 1000000, seed = 1;
  std::string scratch = (std::filesystem::temp_directory_path() / ("troupe_fuzz_" + std::to_string(::getpid()))).string();
  std::vector<std::string> wanted;
  bool list_outcomes = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--outcomes") {
      list_outcomes = true;
    } else if ((a == "--runs" || a == "--seed" || a == "--scratch") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--scratch") scratch = v;
      else (a == "--runs" ? runs : seed) = std::strtoull(v.c_str(), nullptr, 10);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "troupe_fuzz: unknown flag %s; usage: troupe_fuzz [--runs N] [--seed S] [--scratch DIR] [--outcomes] [target ...]\n",
                   a.c_str());
      return 2;
    } else {
      wanted.push_back(a);
    }
  }
  std::filesystem::create_directories(scratch);
  std::vector<FuzzTarget> targets = all_targets(scratch);
  for (const std::string& w : wanted) {
    bool known = false;
    for (const FuzzTarget& t : targets) known = known || t.name == w;
    if (!known) {
      std::fprintf(stderr, "troupe_fuzz: no target '%s' (safetensors, checkpoint, png, corpus, rendezvous, strategy, report, tokenizer)\n", w.c_str());
      return 2;
    }
  }
  bool clean = true;
  for (const FuzzTarget& t : targets) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), t.name) == wanted.end()) continue;
    const FuzzStats s = run_fuzz(t, runs, seed);
    std::printf("{\"target\":\"%s\",\"inputs\":%llu,\"accepted\":%llu,\"refused\":%llu,\"outcomes\":%zu,\"pool\":%zu,"
                "\"defects\":%zu,\"seconds\":%.1f,\"slowest_ms\":%.2f,\"seed\":%llu}\n",
                t.name.c_str(), static_cast<unsigned long long>(s.inputs), static_cast<unsigned long long>(s.accepted),
                static_cast<unsigned long long>(s.refused), s.outcomes.size(), s.pool, s.defects.size(), s.seconds,
                s.slowest_ms, static_cast<unsigned long long>(seed));
    std::fflush(stdout);
    if (list_outcomes) {
      std::printf("  slowest input (%.1f ms):", s.slowest_ms);
      for (unsigned char c : s.slowest.substr(0, 256)) std::printf("%02x", c);
      std::printf("\n");
    }
    if (list_outcomes)
      for (const std::string& o : s.outcomes) std::printf("  %s\n", o.c_str());
    for (const std::string& d : s.defects) std::fprintf(stderr, "troupe_fuzz: %s: %s\n", t.name.c_str(), d.c_str());
    clean = clean && s.defects.empty();
  }
  std::filesystem::remove_all(scratch);
  return clean ? 0 : 1;
}
