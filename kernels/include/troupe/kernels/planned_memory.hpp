#pragma once
// Memory pre-allocation for repeated steps. A step run once under an AllocationRecorder yields its
// blocks with their lifetimes; ArenaLayout places them in one arena; later steps run under a
// PlannedArena::Scope, which hands each host allocation of the thread its planned place instead of
// calling the allocator. A step that allocates differently (other sizes, order or lifetimes) is
// served by the allocator from the first difference on and reports itself diverged, so a plan can
// never make two live tensors share bytes.

#include <cstddef>
#include <memory>
#include <vector>

#include "troupe/kernels/arena_layout.hpp"

namespace troupe {

/// Is told when a block a scope handed out is freed (on whichever thread drops the last tensor).
class MemoryLeaseOwner {
 public:
  virtual ~MemoryLeaseOwner() = default;
  /// Block `index` of the owner is free again.
  virtual void released(std::size_t index) = 0;
};

/// What the thread's scope gives a new Storage: planned memory (null: take it from the allocator)
/// and the owner to tell when the storage goes.
struct MemoryLease {
  void* data = nullptr;
  std::shared_ptr<MemoryLeaseOwner> owner;
  std::size_t index = 0;
};

/// Sees the host allocations of the thread that installed it, while installed: constructing one
/// installs it, destroying it puts back the scope it shadowed (scopes nest).
class HostMemoryScope {
 public:
  HostMemoryScope();
  virtual ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;
  /// The lease for an allocation of `bytes` made on this thread.
  virtual MemoryLease lease(std::size_t bytes) = 0;

 private:
  HostMemoryScope* previous_;
};

/// While it lives, this thread's host allocations go to the allocator whatever scope it shadows:
/// for memory kept beyond the step that first asks for it (a thread's scratch), which no step's
/// plan may hold.
class UnplannedMemory final : public HostMemoryScope {
 public:
  MemoryLease lease(std::size_t) override { return {}; }
};

/// The lease for a new host allocation of `bytes` on this thread: empty unless a scope is
/// installed (Storage asks; nothing else should).
MemoryLease lease_host_memory(std::size_t bytes);

/// Records the host allocations this thread makes while it lives, and when each is freed (on any
/// thread), as the blocks of a ArenaLayout.
class AllocationRecorder final : public HostMemoryScope {
 public:
  AllocationRecorder();
  ~AllocationRecorder() override;
  /// Stops recording; blocks still alive are marked as escaping the step.
  std::vector<PlannedBlock> finish();
  MemoryLease lease(std::size_t bytes) override;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

/// The bytes held at once at the worst tick of `blocks` (escaping ones included): the step's peak
/// without a plan, before the allocator's rounding.
std::size_t peak_live_bytes(const std::vector<PlannedBlock>& blocks);

/// Memory reserved once for a ArenaLayout (one allocator request), serving the allocations of
/// repeated steps at their planned offsets.
class PlannedArena {
 public:
  /// Checks `plan` (against `overlap` when its lifetimes are not tick intervals) and reserves its bytes.
  explicit PlannedArena(ArenaLayout plan, const LifetimeOverlap& overlap = {});
  ~PlannedArena();
  PlannedArena(const PlannedArena&) = delete;
  PlannedArena& operator=(const PlannedArena&) = delete;
  /// The plan it serves.
  const ArenaLayout& plan() const;
  /// The place of block `k` (a free slot of it, for an escaping block) for an allocation of
  /// `bytes`; an empty lease, for the allocator to serve, when k is past the plan, the size is
  /// not k's, or the bytes are still held by a live tensor. Sets `diverged` when the step
  /// allocates other than planned: anything but an escaping block whose slots hold kept results.
  MemoryLease lease_block(std::size_t k, std::size_t bytes, bool& diverged);

  /// Serves this thread's host allocations from the arena while it lives (one scope at a time).
  class Scope final : public HostMemoryScope {
   public:
    explicit Scope(PlannedArena& arena);
    ~Scope() override;
    /// True when the step so far allocated other than planned (sizes, order, count, or a block of
    /// the step still alive): its arena should be replanned.
    bool diverged() const;
    /// How many allocations the arena served.
    std::size_t served() const { return served_; }
    MemoryLease lease(std::size_t bytes) override;

   private:
    PlannedArena& arena_;
    std::size_t next_ = 0;
    std::size_t served_ = 0;
    bool diverged_ = false;
  };

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace troupe
