#pragma once
// Static memory planning: given the blocks one step allocates, each with its lifetime over the
// step's schedule, assign every block an offset in one arena so that blocks alive at the same time
// never overlap (best-fit by decreasing size, as XLA's heap simulator does), and check a plan.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace troupe {

/// One allocation of a step: its size and its lifetime [begin, end) in schedule ticks.
struct PlannedBlock {
  /// `end` of a block still alive when the step is over: it outlives the step (an output).
  static constexpr std::uint64_t escapes = std::numeric_limits<std::uint64_t>::max();
  std::size_t bytes = 0;
  std::uint64_t begin = 0;
  std::uint64_t end = escapes;
  /// True when the block is still alive after the step.
  bool escaped() const { return end == escapes; }
  /// The bytes the block takes in a plan: its size rounded up to ArenaLayout::alignment (at least one line).
  std::size_t planned_bytes() const;
};

/// Whether blocks i and j of a step may be alive at the same time, for lifetimes that are not
/// intervals of one schedule (the acts of an actor program are only partly ordered). Left empty,
/// planning compares the blocks' tick intervals.
using LifetimeOverlap = std::function<bool(std::size_t, std::size_t)>;

/// Offsets for the blocks of a step. Blocks that live only within the step share one arena of
/// `arena_bytes`; blocks that escape it get `escape_slots` disjoint slots each after the arena,
/// so a result the caller still holds is never overwritten by the next step.
struct ArenaLayout {
  /// Every block starts on this boundary (one cache line, enough for AVX-512).
  static constexpr std::size_t alignment = 64;
  std::vector<PlannedBlock> blocks;  // in request order
  std::vector<std::size_t> offset;   // per block: arena offset, or the first escape slot's offset
  std::size_t arena_bytes = 0;       // the planned peak of the step's own blocks
  std::size_t total_bytes = 0;       // arena plus escape slots: what the plan reserves
  int escape_slots = 2;

  /// The plan for `blocks`: best fit by decreasing size, each block in the smallest gap left
  /// between the blocks already placed whose lifetimes overlap its own (`overlap` when given).
  static ArenaLayout build(std::vector<PlannedBlock> blocks, int escape_slots = 2, const LifetimeOverlap& overlap = {});
  /// The sum of the step's block sizes: what it would hold with no reuse at all.
  std::size_t unplanned_bytes() const;
};

/// Throws a troupe::Error naming both blocks when two blocks whose lifetimes overlap share bytes,
/// or when a block lies outside the memory the plan reserves. With `overlap` every pair is
/// compared; without, a sweep over the tick intervals.
void check_arena_layout(const ArenaLayout& plan, const LifetimeOverlap& overlap = {});

}  // namespace troupe
