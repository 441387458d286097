#pragma once
// A deterministic mutator for the fuzz harnesses: from a seed input it makes hostile variants the
// way libFuzzer's default mutations do (bit flips, random and boundary bytes, inserted, erased,
// duplicated and spliced ranges, truncation), plus what breaks parsers of sizes and JSON: boundary
// integers written over 4 or 8 bytes, hostile numbers in place of digit runs, and tokens from a
// per-target dictionary. The same seed gives the same inputs on every machine.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace troupe::fuzz {

/// Makes mutated copies of inputs; deterministic for a given seed.
class Mutator {
 public:
  /// `dictionary`: tokens worth splicing in (keys, magic strings); `max_size` caps the output.
  Mutator(std::uint64_t seed, std::vector<std::string> dictionary, std::size_t max_size = 1 << 16);
  /// A variant of `input` after one to five stacked mutations; `other` is a second input to splice from.
  std::string mutate(const std::string& input, const std::string& other);
  /// A number in [0, n); n > 0.
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(rng_() % n); }

 private:
  void mutate_once(std::string& s, const std::string& other);
  std::mt19937_64 rng_;
  std::vector<std::string> dictionary_;
  std::size_t max_size_;
};

}  // namespace troupe::fuzz
