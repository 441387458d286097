#pragma once
// Memory pre-allocation for a function called again and again (a traced graph at JIT level 3):
// one planned arena per bound shape, so a step makes no allocator calls once its plan exists, and
// a new batch size plans once instead of falling back to allocating every call.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "troupe/kernels/planned_memory.hpp"
#include "troupe/kernels/shape.hpp"

namespace troupe::graph {

/// What planning did for the latest shape a cache ran: the measured and planned peaks.
struct MemoryPlanReport {
  std::size_t measured_peak_bytes = 0;  // held at once by the recorded call, allocating freely
  std::size_t unplanned_bytes = 0;      // the recorded call's blocks (those not returned) summed
  std::size_t planned_bytes = 0;        // the arena for those blocks, after sharing by lifetime
  std::size_t reserved_bytes = 0;       // the arena plus the slots of returned blocks
  std::size_t blocks = 0;               // allocations per call
  std::size_t memory_edges = 0;         // actor programs: orderings between acts the plan adds (step_memory.hpp)
  std::uint64_t plans_built = 0;        // over the cache's life, all shapes
  std::uint64_t calls_served = 0;       // calls that ran in an arena, all shapes
  /// "X MiB peak measured, Y MiB planned (N blocks, Z MiB without reuse)": what the apps print.
  std::string describe() const;
};

/// A bounded cache of planned arenas keyed by the shapes of a call's inputs, evicting the least
/// recently used. A call at a shape with no plan runs recording its allocations and plans them;
/// later calls run in the arena. A call that allocates differently from its plan (a different
/// code path, a result kept alive) is still correct, served by the allocator from the difference
/// on, and its shape is recorded again on the next call.
class ArenaLayoutCache {
 public:
  /// At most `capacity` shapes keep an arena.
  explicit ArenaLayoutCache(std::size_t capacity = 8);
  /// Runs `call` with the plan for `key`: recording, in the arena, or (while another thread
  /// uses that arena) plainly.
  void run(const std::vector<Shape>& key, const std::function<void()>& call);
  /// The report of the shape run last.
  MemoryPlanReport report() const;
  /// Shapes holding a plan now.
  std::size_t size() const;

 private:
  struct Entry {
    std::vector<Shape> key;
    std::shared_ptr<PlannedArena> arena;  // null until recorded, and after a divergence
    bool busy = false;
    MemoryPlanReport report;
  };
  Entry& entry_for(const std::vector<Shape>& key);  // the caller locks

  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  std::uint64_t plans_built_ = 0, calls_served_ = 0;
  MemoryPlanReport last_;
};

}  // namespace troupe::graph
