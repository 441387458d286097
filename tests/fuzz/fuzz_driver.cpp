#include "fuzz/fuzz_driver.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <set>

#include "fuzz/mutator.hpp"
#include "fuzz/targets.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::fuzz {

namespace {

constexpr std::size_t kPoolLimit = 1024;

// A refusal's message reduced to its fixed words (lower-case words; names, numbers, quoted file
// contents and codes like libpng's chunk names dropped), so inputs that fail the same check in the
// same way count as one outcome.
std::string outcome_of(const std::string& message) {
  std::string out, word;
  bool quoted = false;
  const auto flush = [&] {
    const bool fixed = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || c == '-' || c == '_';
    });
    if (fixed) out += (out.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : message) {
    if (c == '\'') quoted = !quoted;
    if (quoted || c == '\'') continue;
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '[' || c == ']') word += c;
    else flush();
  }
  flush();
  return out.substr(0, 160);
}

// True when `text` holds a byte that would break a one-line message or reach the terminal as a
// control code.
bool has_control_bytes(const std::string& text) {
  return std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes.substr(0, 512)) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out + (bytes.size() > 512 ? "..." : "");
}

}  // namespace

FuzzStats run_fuzz(const FuzzTarget& target, std::uint64_t runs, std::uint64_t seed, std::size_t max_defects) {
  Mutator mutator(seed, target.dictionary);
  std::vector<std::string> pool = target.seeds;
  FuzzStats stats;
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < runs && stats.defects.size() < max_defects; ++i) {
    // The seeds themselves first, then mutations of the pool.
    std::string input = i < pool.size() && i < target.seeds.size()
                            ? pool[i]
                            : mutator.mutate(pool[mutator.below(pool.size())], pool[mutator.below(pool.size())]);
    if (target.repair && i >= target.seeds.size()) target.repair(input);
    const auto t0 = std::chrono::steady_clock::now();
    std::string outcome;
    try {
      outcome = target.run(input);
      ++stats.accepted;
    } catch (const Error& e) {
      ++stats.refused;
      const std::string what = e.what();
      if (has_control_bytes(what))
        stats.defects.push_back("an error with line breaks or control bytes: " + printable(what) + "; input " + hex(input));
      outcome = outcome_of(e.message());
    } catch (const std::exception& e) {
      stats.defects.push_back(std::string("a non-Troupe exception escaped: ") + e.what() + "; input " + hex(input));
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ms > stats.slowest_ms) {
      stats.slowest_ms = ms;
      stats.slowest = input;
    }
    ++stats.inputs;
    if (!outcome.empty() && stats.outcomes.insert(outcome).second && pool.size() < kPoolLimit) pool.push_back(input);
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.pool = pool.size();
  return stats;
}

std::vector<FuzzTarget> all_targets(const std::string& scratch) {
  return {safetensors_target(scratch), checkpoint_target(scratch), png_target(scratch), corpus_target(scratch),
          rendezvous_target(scratch), strategy_target(scratch), report_target(scratch), tokenizer_target(scratch)};
}

}  // namespace troupe::fuzz
