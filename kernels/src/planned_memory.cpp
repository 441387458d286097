#include "troupe/kernels/planned_memory.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe {

namespace {
thread_local HostMemoryScope* current_scope = nullptr;
}  // namespace

HostMemoryScope::HostMemoryScope() : previous_(current_scope) { current_scope = this; }

HostMemoryScope::~HostMemoryScope() { current_scope = previous_; }

MemoryLease lease_host_memory(std::size_t bytes) { return current_scope ? current_scope->lease(bytes) : MemoryLease{}; }

// ---- recording ----

struct AllocationRecorder::State final : MemoryLeaseOwner {
  std::mutex mutex;
  std::uint64_t tick = 0;
  std::vector<PlannedBlock> blocks;
  bool finished = false;

  void released(std::size_t index) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (!finished) blocks[index].end = tick++;
  }
};

AllocationRecorder::AllocationRecorder() : state_(std::make_shared<State>()) {}

AllocationRecorder::~AllocationRecorder() { finish(); }

MemoryLease AllocationRecorder::lease(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->finished) return {};
  state_->blocks.push_back(PlannedBlock{bytes, state_->tick++, PlannedBlock::escapes});
  return MemoryLease{nullptr, state_, state_->blocks.size() - 1};
}

std::vector<PlannedBlock> AllocationRecorder::finish() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->finished = true;
  return state_->blocks;
}

std::size_t peak_live_bytes(const std::vector<PlannedBlock>& blocks) {
  std::map<std::uint64_t, std::int64_t> delta;  // tick -> change in live bytes
  for (const PlannedBlock& b : blocks) {
    delta[b.begin] += static_cast<std::int64_t>(b.bytes);
    if (!b.escaped()) delta[b.end] -= static_cast<std::int64_t>(b.bytes);
  }
  std::int64_t live = 0, peak = 0;
  for (const auto& [tick, change] : delta) peak = std::max(peak, live += change);
  return static_cast<std::size_t>(peak);
}

// ---- serving from an arena ----

// The arena's memory and which of its slots hold a live tensor. A slot is a block's place (an
// escaping block has plan.escape_slots of them). Leases share it, so the memory outlives the arena
// object while a tensor still uses it.
struct PlannedArena::State final : MemoryLeaseOwner {
  ArenaLayout plan;
  char* base = nullptr;
  std::vector<std::size_t> first_slot;                  // per block
  std::vector<std::pair<std::size_t, std::size_t>> slots;  // [offset, end) per slot
  std::mutex mutex;
  std::vector<char> live;            // per slot
  std::vector<std::size_t> live_slots;
  std::atomic<bool> scoped{false};

  ~State() override {
    if (base) cpu_allocator().deallocate(base, plan.total_bytes);
  }

  void released(std::size_t slot) override {
    std::lock_guard<std::mutex> lock(mutex);
    live[slot] = 0;
    const auto it = std::find(live_slots.begin(), live_slots.end(), slot);
    if (it != live_slots.end()) live_slots.erase(it);
  }

  // Takes `slot` if neither it nor any live slot sharing its bytes is in use (the caller locks).
  bool take(std::size_t slot) {
    if (live[slot]) return false;
    const auto [start, stop] = slots[slot];
    for (std::size_t other : live_slots)
      if (slots[other].first < stop && start < slots[other].second) return false;
    live[slot] = 1;
    live_slots.push_back(slot);
    return true;
  }
};

PlannedArena::PlannedArena(ArenaLayout plan, const LifetimeOverlap& overlap) : state_(std::make_shared<State>()) {
  check_arena_layout(plan, overlap);
  State& s = *state_;
  s.plan = std::move(plan);
  for (std::size_t k = 0; k < s.plan.blocks.size(); ++k) {
    s.first_slot.push_back(s.slots.size());
    const std::size_t size = s.plan.blocks[k].planned_bytes();
    const int count = s.plan.blocks[k].escaped() ? s.plan.escape_slots : 1;
    for (int i = 0; i < count; ++i) {
      const std::size_t start = s.plan.offset[k] + static_cast<std::size_t>(i) * size;
      s.slots.emplace_back(start, start + size);
    }
  }
  s.live.assign(s.slots.size(), 0);
  if (s.plan.total_bytes > 0) s.base = static_cast<char*>(cpu_allocator().allocate(s.plan.total_bytes));
}

PlannedArena::~PlannedArena() = default;

const ArenaLayout& PlannedArena::plan() const { return state_->plan; }

PlannedArena::Scope::Scope(PlannedArena& arena) : arena_(arena) {
  TROUPE_CHECK(!arena_.state_->scoped.exchange(true), invalid_argument,
               "a planned arena serves one step at a time; this one is already serving a step");
}

PlannedArena::Scope::~Scope() { arena_.state_->scoped = false; }

MemoryLease PlannedArena::lease_block(std::size_t k, std::size_t bytes, bool& diverged) {
  State& s = *state_;
  if (k >= s.plan.blocks.size() || s.plan.blocks[k].bytes != bytes) {
    diverged = true;
    return {};
  }
  const bool escapes = s.plan.blocks[k].escaped();
  const std::size_t count = escapes ? static_cast<std::size_t>(s.plan.escape_slots) : 1;
  std::lock_guard<std::mutex> lock(s.mutex);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t slot = s.first_slot[k] + i;
    if (s.take(slot)) return MemoryLease{s.base + s.slots[slot].first, state_, slot};
  }
  // An escaping block whose slots all hold results the caller kept is simply allocated; a block
  // of the step whose place is taken means the step's lifetimes changed since it was recorded.
  if (!escapes) diverged = true;
  return {};
}

MemoryLease PlannedArena::Scope::lease(std::size_t bytes) {
  const std::size_t k = next_++;
  if (diverged_) return {};
  MemoryLease lease = arena_.lease_block(k, bytes, diverged_);
  if (lease.data) ++served_;
  return lease;
}

bool PlannedArena::Scope::diverged() const {
  State& s = *arena_.state_;
  if (diverged_ || next_ != s.plan.blocks.size()) return true;
  std::lock_guard<std::mutex> lock(s.mutex);
  for (std::size_t slot : s.live_slots) {
    const auto block = std::upper_bound(s.first_slot.begin(), s.first_slot.end(), slot) - s.first_slot.begin() - 1;
    if (!s.plan.blocks[static_cast<std::size_t>(block)].escaped()) return true;
  }
  return false;
}

}  // namespace troupe
