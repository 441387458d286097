#pragma once
// The process's one pool of cores for the CPU kernels. A kernel splits its work into tiles fixed by
// the work's size alone (never by the thread count, so every thread count computes the same bits)
// and runs them on its own thread, joined by as many pool helpers as there are idle cores: an op
// that runs alone uses every core, two ops running side by side on the actors' scheduler threads
// keep one core each. A core is busy while a thread computes a kernel (dispatch marks its caller,
// KernelCallScope) or helps one; idle cores = parallel_cores() - busy.

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace troupe::cpu {

/// Marks this thread as computing a kernel while it lives (nested scopes count once).
class KernelCallScope {
 public:
  KernelCallScope();
  ~KernelCallScope();
  KernelCallScope(const KernelCallScope&) = delete;
  KernelCallScope& operator=(const KernelCallScope&) = delete;

 private:
  bool counted_;
};

/// Cores neither computing a kernel nor helping one, out of parallel_cores().
int idle_cores();

/// Runs run(context, t) for every t in [0, tiles), on this thread and up to `helpers` pool threads
/// taken from the idle cores; returns once every tile is done. The first exception a tile throws
/// is rethrown here after the others finished.
void run_tiles(std::int64_t tiles, int helpers, void (*run)(void*, std::int64_t), void* context);

/// The helpers worth waking for `tiles` tiles of about `tile_work` nanoseconds each: one per
/// `kMinParallelWork` of the whole beyond the first, as a helper's wake-up costs some microseconds,
/// and no more than the idle cores and the tiles after the caller's first.
int helpers_for(std::int64_t tiles, double tile_work);

/// Work (about nanoseconds) below which a helper costs more than it saves.
inline constexpr double kMinParallelWork = 40000;

/// Elements per tile of a parallel elementwise walk: 64 KiB of f32 per operand, a cache's worth.
inline constexpr std::int64_t kElementTile = 16384;

/// Runs body(t) for t in [0, tiles) with the idle cores' help, each tile about `tile_work` units.
template <class Body>
void parallel_tiles(std::int64_t tiles, double tile_work, Body&& body) {
  if (tiles <= 0) return;
  const int helpers = tiles > 1 ? helpers_for(tiles, tile_work) : 0;
  if (helpers == 0) {
    for (std::int64_t t = 0; t < tiles; ++t) body(t);
    return;
  }
  using B = std::remove_reference_t<Body>;
  run_tiles(tiles, helpers, [](void* c, std::int64_t t) { (*static_cast<B*>(c))(t); },
            const_cast<void*>(static_cast<const void*>(&body)));
}

/// Runs body(begin, end) over [0, n) in chunks of `grain` items, `item_work` units each.
template <class Body>
void parallel_ranges(std::int64_t n, std::int64_t grain, double item_work, Body&& body) {
  if (n <= 0) return;
  const std::int64_t tiles = (n + grain - 1) / grain;
  parallel_tiles(tiles, static_cast<double>(grain) * item_work, [&](std::int64_t t) {
    const std::int64_t begin = t * grain;
    body(begin, std::min(n, begin + grain));
  });
}

/// Runs body(begin, end) over `rows` rows of `width` elements, in tiles of about kElementTile
/// elements (at least a row), each element costing about `element_work` nanoseconds.
template <class Body>
void parallel_rows(std::int64_t rows, std::int64_t width, double element_work, Body&& body) {
  const std::int64_t w = std::max<std::int64_t>(1, width);
  parallel_ranges(rows, std::max<std::int64_t>(1, kElementTile / w), element_work * static_cast<double>(w), body);
}

}  // namespace troupe::cpu
