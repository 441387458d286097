#pragma once
// splitmix64: the small, well-mixed generator the apps' data pipelines draw from (window starts,
// generated text, procedural images, sampling), so their output depends only on seeds and counters.

#include <cstdint>

namespace troupe::models {

/// Advances `state` and returns the next 64-bit value of its stream.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// A stateless hash of `key` (the first value of the stream seeded with it).
inline std::uint64_t mix64(std::uint64_t key) { return splitmix64(key); }

/// The next value of the stream as a uniform double in [0, 1).
inline double uniform01(std::uint64_t& state) { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; }

}  // namespace troupe::models
