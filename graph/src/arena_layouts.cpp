#include "troupe/graph/arena_layouts.hpp"

#include <cstdio>

#include "troupe/kernels/error.hpp"

namespace troupe::graph {

std::string MemoryPlanReport::describe() const {
  char line[200];
  std::snprintf(line, sizeof line, "%.1f MiB peak measured, %.1f MiB planned (%zu blocks, %.1f MiB without reuse%s)",
                measured_peak_bytes / 1048576.0, reserved_bytes / 1048576.0, blocks, unplanned_bytes / 1048576.0,
                memory_edges > 0 ? (", " + std::to_string(memory_edges) + " memory edges").c_str() : "");
  return line;
}

ArenaLayoutCache::ArenaLayoutCache(std::size_t capacity) : capacity_(capacity) {
  TROUPE_CHECK(capacity_ >= 1, invalid_argument, "a memory plan cache needs room for at least one shape");
}

ArenaLayoutCache::Entry& ArenaLayoutCache::entry_for(const std::vector<Shape>& key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->key == key) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front();
    }
  // Evict the least recently used idle shape; its arena lives on while results still use it.
  if (entries_.size() >= capacity_)
    for (auto it = entries_.end(); it != entries_.begin();) {
      --it;
      if (!it->busy) {
        entries_.erase(it);
        break;
      }
    }
  entries_.push_front(Entry{key, nullptr, false, {}});
  return entries_.front();
}

void ArenaLayoutCache::run(const std::vector<Shape>& key, const std::function<void()>& call) {
  Entry* entry = nullptr;
  std::shared_ptr<PlannedArena> arena;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entry_for(key);
    if (e.busy) {
      entry = nullptr;  // another thread runs this shape: this call allocates as usual
    } else {
      e.busy = true;
      entry = &e;
      arena = e.arena;
    }
  }
  if (!entry) {
    call();
    return;
  }
  // Busy entries are never evicted, so `entry` stays valid until this releases it.
  auto finish = [&](std::shared_ptr<PlannedArena> keep, const MemoryPlanReport* fresh, bool served) {
    std::lock_guard<std::mutex> lock(mutex_);
    entry->arena = std::move(keep);
    if (fresh) {
      entry->report = *fresh;
      ++plans_built_;
    }
    if (served) ++calls_served_;
    entry->busy = false;
    last_ = entry->report;
  };
  try {
    if (arena) {
      bool diverged;
      {
        PlannedArena::Scope scope(*arena);
        call();
        diverged = scope.diverged();
      }
      finish(diverged ? nullptr : arena, nullptr, !diverged);
      return;
    }
    std::vector<PlannedBlock> blocks;
    {
      AllocationRecorder recorder;
      call();
      blocks = recorder.finish();
    }
    MemoryPlanReport fresh;
    fresh.measured_peak_bytes = peak_live_bytes(blocks);
    fresh.blocks = blocks.size();
    auto planned = std::make_shared<PlannedArena>(ArenaLayout::build(std::move(blocks)));
    fresh.unplanned_bytes = planned->plan().unplanned_bytes();
    fresh.planned_bytes = planned->plan().arena_bytes;
    fresh.reserved_bytes = planned->plan().total_bytes;
    finish(std::move(planned), &fresh, false);
  } catch (...) {
    finish(nullptr, nullptr, false);  // a call cut short is no plan; record the shape again
    throw;
  }
}

MemoryPlanReport ArenaLayoutCache::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryPlanReport r = last_;
  r.plans_built = plans_built_;
  r.calls_served = calls_served_;
  return r;
}

std::size_t ArenaLayoutCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace troupe::graph
