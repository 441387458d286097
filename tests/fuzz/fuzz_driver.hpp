#pragma once
// Runs a fuzz target over mutated inputs. A target turns bytes into an outcome; a troupe::Error is
// the expected refusal of bad input, and it must be one line without control bytes. Anything else
// (another exception type escaping, an error over several lines) is a defect, reported with the input that caused it;
// a crash or an out-of-bounds access is caught by the sanitizer the harness runs under. Inputs
// whose outcome is new join the pool that later inputs are mutated from, so the run works its way
// past the first check of a format rather than failing it a million times.

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace troupe::fuzz {

/// One parser of outside bytes, made fuzzable.
struct FuzzTarget {
  std::string name;
  std::vector<std::string> seeds;       // valid inputs the pool starts from
  std::vector<std::string> dictionary;  // tokens of the format (keys, magic) for the mutator
  /// Runs one input; returns a short name of what happened when the input was taken ("accepted",
  /// "hello accepted, blob refused"); throws troupe::Error for a refusal.
  std::function<std::string(const std::string&)> run;
  /// Applied to each mutated input before it runs (PNG: recompute chunk CRCs); may be empty.
  std::function<void(std::string&)> repair;
};

/// What one fuzz run did.
struct FuzzStats {
  std::uint64_t inputs = 0, accepted = 0, refused = 0;
  std::set<std::string> outcomes;  // distinct outcomes: what accepted inputs did, refusals with numbers and names blanked
  std::size_t pool = 0;       // inputs in the pool at the end
  double seconds = 0, slowest_ms = 0;
  std::string slowest;               // the input that took slowest_ms
  std::vector<std::string> defects;  // one line each: what escaped, then the input in hex
};

/// Runs `runs` inputs of `target` from `seed`; stops at the first `max_defects` defects.
FuzzStats run_fuzz(const FuzzTarget& target, std::uint64_t runs, std::uint64_t seed, std::size_t max_defects = 5);

/// The fuzz targets: safetensors, checkpoint, png, corpus, rendezvous, strategy, report. `scratch` is a folder the
/// file-reading targets may write into.
std::vector<FuzzTarget> all_targets(const std::string& scratch);

}  // namespace troupe::fuzz
