#pragma once
// Dropout's decisions, counter-based (Philox): whether an element is dropped depends only on the
// training's seed, the step, the dropout site and the element's place in the whole step's batch
// (its row of the global batch, its index along dim 1, and its offset within the dims after), so
// the same run drops the same elements at any thread count, micro-batch count, data-parallel or
// tensor-parallel size, and after a resume.

#include <array>
#include <cstdint>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Where a run draws its random numbers: set per step (and per micro-batch and replica) by the
/// runtime, read by the ops that draw.
struct RandomPosition {
  std::uint64_t seed = 0;      // the training's seed
  std::uint64_t step = 0;      // the update being computed (from 1)
  std::int64_t first_row = 0;  // the row of the step's global batch that is the tensor's row 0
};

/// The drop decisions of one dropout site in one step.
class DropoutStream {
 public:
  /// `site` names the dropout (a hash of its name); `p` in [0, 1) is the probability of a drop.
  DropoutStream(const RandomPosition& at, std::uint64_t site, double p);
  /// The factor of element `inner` + 0..3 (its offset in the dims after the first two, four at a
  /// time) at global row `row` and dim-1 index `column`: 0 when dropped, 1 / (1 - p) when kept.
  std::array<float, 4> factors(std::int64_t row, std::int64_t column, std::int64_t inner) const;
  /// Fills factors[0, n) with the factors of elements inner .. inner + n - 1 of (row, column).
  void fill(std::int64_t row, std::int64_t column, std::int64_t inner, std::int64_t n, float* factors) const;
  double p() const { return p_; }

 private:
  std::uint64_t key_;
  std::uint32_t threshold_;  // a word below it drops its element
  float scale_;
  double p_;
};

/// Dropout's factors for a tensor of `shape` (rank >= 1), in `dtype`: element [r, c, ...] gets
/// the factor of global row at.first_row + row_offset + r and column column_offset + c. The
/// offsets place a tensor-parallel shard in the whole tensor.
Tensor dropout_mask(const Shape& shape, DType dtype, double p, std::uint64_t site, const RandomPosition& at,
                    std::int64_t row_offset = 0, std::int64_t column_offset = 0);

}  // namespace troupe::kernels
