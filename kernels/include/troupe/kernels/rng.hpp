#pragma once
// Counter-based random numbers (Philox-4x32-10): element i of a fill depends only on (seed, offset, i),
// so results are identical whatever the thread count or the order of work.

#include <array>
#include <cstdint>

#include "troupe/kernels/tensor.hpp"

namespace troupe {

/// Philox-4x32 with 10 rounds: maps a 128-bit counter and a 64-bit key to 128 random bits.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter, std::uint64_t key);

/// A seeded stream of random fills. Each fill consumes a range of counters, so successive fills
/// differ, and the state (seed, offset) is two integers that checkpoints can save and restore.
class Generator {
 public:
  /// A generator whose stream starts at counter 0.
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  std::uint64_t seed() const { return seed_; }
  /// Counter position of the next fill (in 128-bit blocks).
  std::uint64_t offset() const { return offset_; }
  /// Moves the stream to `offset` (restoring a checkpoint).
  void set_offset(std::uint64_t offset) { offset_ = offset; }

  /// Fills a floating tensor with U[low, high).
  void uniform_(Tensor& t, double low = 0.0, double high = 1.0);
  /// Fills a floating tensor with N(mean, std^2) (Box-Muller on pairs of uniforms).
  void normal_(Tensor& t, double mean = 0.0, double std = 1.0);

 private:
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

}  // namespace troupe
