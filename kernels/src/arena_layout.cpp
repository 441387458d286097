#include "troupe/kernels/arena_layout.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "troupe/kernels/error.hpp"

namespace troupe {

namespace {

bool lifetimes_overlap(const PlannedBlock& a, const PlannedBlock& b) { return a.begin < b.end && b.begin < a.end; }

}  // namespace

std::size_t PlannedBlock::planned_bytes() const {
  return std::max<std::size_t>(1, (bytes + ArenaLayout::alignment - 1) / ArenaLayout::alignment) * ArenaLayout::alignment;
}

ArenaLayout ArenaLayout::build(std::vector<PlannedBlock> blocks, int escape_slots, const LifetimeOverlap& overlap) {
  TROUPE_CHECK(escape_slots >= 1, invalid_argument, "a memory plan needs at least one slot per escaping block");
  ArenaLayout plan;
  plan.blocks = std::move(blocks);
  plan.escape_slots = escape_slots;
  plan.offset.assign(plan.blocks.size(), 0);

  std::vector<std::size_t> order;
  for (std::size_t k = 0; k < plan.blocks.size(); ++k)
    if (!plan.blocks[k].escaped()) order.push_back(k);
  // Largest first: big blocks fix the arena's shape, small ones fill the gaps they leave.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return plan.blocks[a].planned_bytes() > plan.blocks[b].planned_bytes();
  });

  std::vector<std::size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> busy;  // [offset, end) of overlapping placed blocks
  for (std::size_t k : order) {
    const PlannedBlock& block = plan.blocks[k];
    const std::size_t size = block.planned_bytes();
    busy.clear();
    for (std::size_t j : placed)
      if (overlap ? overlap(k, j) : lifetimes_overlap(block, plan.blocks[j]))
        busy.emplace_back(plan.offset[j], plan.offset[j] + plan.blocks[j].planned_bytes());
    std::sort(busy.begin(), busy.end());
    // Walk the gaps between busy ranges; keep the smallest one that fits, else go above them all.
    std::size_t best = 0, best_gap = 0, cursor = 0;
    bool found = false;
    for (const auto& [start, stop] : busy) {
      if (start > cursor) {
        const std::size_t gap = start - cursor;
        if (gap >= size && (!found || gap < best_gap)) {
          best = cursor;
          best_gap = gap;
          found = true;
        }
      }
      cursor = std::max(cursor, stop);
    }
    plan.offset[k] = found ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offset[k] + size);
    placed.push_back(k);
  }

  // Escaping blocks: each its own slots above the arena, never shared with anything.
  std::size_t top = plan.arena_bytes;
  for (std::size_t k = 0; k < plan.blocks.size(); ++k) {
    if (!plan.blocks[k].escaped()) continue;
    plan.offset[k] = top;
    top += plan.blocks[k].planned_bytes() * static_cast<std::size_t>(escape_slots);
  }
  plan.total_bytes = top;
  return plan;
}

std::size_t ArenaLayout::unplanned_bytes() const {
  return std::accumulate(blocks.begin(), blocks.end(), std::size_t{0},
                         [](std::size_t sum, const PlannedBlock& b) { return b.escaped() ? sum : sum + b.planned_bytes(); });
}

namespace {

// The bytes block k takes in `plan`: all its slots when it escapes.
std::size_t footprint(const ArenaLayout& plan, std::size_t k) {
  const PlannedBlock& block = plan.blocks[k];
  return block.planned_bytes() * (block.escaped() ? static_cast<std::size_t>(plan.escape_slots) : 1);
}

void check_bounds(const ArenaLayout& plan, std::size_t k) {
  TROUPE_CHECK(plan.offset[k] % ArenaLayout::alignment == 0 && plan.offset[k] + footprint(plan, k) <= plan.total_bytes,
               runtime, "memory plan: block ", k, " (", plan.blocks[k].bytes, " bytes at ", plan.offset[k],
               ") is misaligned or outside the ", plan.total_bytes, " planned bytes");
}

void check_disjoint(const ArenaLayout& plan, std::size_t j, std::size_t k) {
  const bool disjoint = plan.offset[k] + footprint(plan, k) <= plan.offset[j] || plan.offset[j] + footprint(plan, j) <= plan.offset[k];
  TROUPE_CHECK(disjoint, runtime, "memory plan: blocks ", j, " and ", k, " are alive together (ticks [",
               plan.blocks[j].begin, ", ", plan.blocks[j].end, ") and [", plan.blocks[k].begin, ", ", plan.blocks[k].end,
               ")) but share bytes (offsets ", plan.offset[j], " and ", plan.offset[k], ")");
}

}  // namespace

void check_arena_layout(const ArenaLayout& plan, const LifetimeOverlap& overlap) {
  TROUPE_CHECK(plan.offset.size() == plan.blocks.size(), invalid_argument, "memory plan: ", plan.offset.size(),
               " offsets for ", plan.blocks.size(), " blocks");
  if (overlap) {
    // Escaping blocks own their slots, so they overlap everything.
    for (std::size_t k = 0; k < plan.blocks.size(); ++k) {
      check_bounds(plan, k);
      for (std::size_t j = 0; j < k; ++j)
        if (plan.blocks[j].escaped() || plan.blocks[k].escaped() || overlap(j, k)) check_disjoint(plan, j, k);
    }
    return;
  }
  // Sweep the blocks in order of their start; compare each with those still alive.
  std::vector<std::size_t> by_start(plan.blocks.size());
  std::iota(by_start.begin(), by_start.end(), std::size_t{0});
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](std::size_t a, std::size_t b) { return plan.blocks[a].begin < plan.blocks[b].begin; });
  std::vector<std::size_t> alive;
  for (std::size_t k : by_start) {
    const PlannedBlock& block = plan.blocks[k];
    check_bounds(plan, k);
    alive.erase(std::remove_if(alive.begin(), alive.end(),
                               [&](std::size_t j) { return plan.blocks[j].end <= block.begin; }),
                alive.end());
    for (std::size_t j : alive) check_disjoint(plan, j, k);
    alive.push_back(k);
  }
}

}  // namespace troupe
