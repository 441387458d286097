// The memory planner (offsets by lifetime, best fit by decreasing size), its checker, and the
// arena that serves a recorded step: no allocator calls, no two live tensors sharing bytes, and
// a step that allocates differently still correct.
#include <gtest/gtest.h>

#include <random>

#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/planned_memory.hpp"
#include "troupe/kernels/tensor.hpp"

using namespace troupe;

namespace {

PlannedBlock block(std::size_t bytes, std::uint64_t begin, std::uint64_t end) { return PlannedBlock{bytes, begin, end}; }

// A step of the shape a network has: x -> a -> b -> c, each temporary freed after its reader,
// returning c + x; another length of x is another allocation pattern.
Tensor step(const Tensor& x) {
  Tensor a = kernels::mul(x, 2.0);
  Tensor b = kernels::add(a, 1.0);
  a = Tensor();
  Tensor c = kernels::mul(b, b);
  b = Tensor();
  return kernels::add(c, x);
}

Tensor input(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i % 17) - 1.f;
  return Tensor::from_vector(v, {n});
}

bool same_values(const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); }

std::shared_ptr<PlannedArena> record(const Tensor& x, Tensor* result = nullptr) {
  AllocationRecorder recorder;
  Tensor r = step(x);
  if (result) *result = r;
  return std::make_shared<PlannedArena>(ArenaLayout::build(recorder.finish()));
}

}  // namespace

TEST(ArenaLayout, BlocksAliveTogetherNeverShareAndOthersDo) {
  // a and b overlap in time; c starts after a ended, so it can take a's place.
  const ArenaLayout plan = ArenaLayout::build({block(100, 0, 4), block(200, 1, 6), block(64, 5, 8)});
  check_arena_layout(plan);
  EXPECT_EQ(plan.arena_bytes, 128u + 256u);
  EXPECT_EQ(plan.unplanned_bytes(), 128u + 256u + 64u);
  EXPECT_NE(plan.offset[0], plan.offset[1]);
  EXPECT_EQ(plan.offset[2], plan.offset[0]) << "c fits the gap a left";
}

TEST(ArenaLayout, BestFitTakesTheSmallestGapThatFits) {
  // Placed by size: 1024 at 0, 512 at 1024, 256 at 1536, 128 at 1792, 128 at 1920. The 512 and
  // the first 128 die early, leaving holes of 512 and 128 bytes among the long-lived blocks; a
  // later 64-byte block takes the 128-byte hole (first fit would take the 512 one).
  const std::vector<PlannedBlock> blocks{block(1024, 0, 100), block(512, 0, 2), block(256, 0, 100),
                                         block(128, 0, 2),    block(128, 0, 100), block(64, 3, 5)};
  const ArenaLayout plan = ArenaLayout::build(blocks);
  check_arena_layout(plan);
  EXPECT_EQ(plan.offset[1], 1024u);
  EXPECT_EQ(plan.offset[3], 1792u);
  EXPECT_EQ(plan.offset[5], plan.offset[3]);
  EXPECT_EQ(plan.arena_bytes, 2048u);
}

TEST(ArenaLayout, EscapingBlocksGetTheirOwnSlots) {
  const ArenaLayout plan = ArenaLayout::build({block(100, 0, 2), block(100, 1, PlannedBlock::escapes)}, 2);
  check_arena_layout(plan);
  EXPECT_EQ(plan.arena_bytes, 128u);
  EXPECT_EQ(plan.total_bytes, 128u + 2 * 128u);
  EXPECT_GE(plan.offset[1], plan.arena_bytes);
}

// Lifetimes that are not intervals of one schedule (an actor program's acts are only partly
// ordered): the planner and the checker follow the given relation, not the ticks.
TEST(ArenaLayout, ALifetimeRelationOtherThanTicksIsHonouredAndChecked) {
  // By ticks all three are disjoint in time; the relation says 0 and 2 may be alive together.
  const std::vector<PlannedBlock> blocks{block(100, 0, 1), block(100, 1, 2), block(100, 2, 3)};
  const LifetimeOverlap overlap = [](std::size_t i, std::size_t j) { return i + j == 2 && i != j; };
  const ArenaLayout by_ticks = ArenaLayout::build(blocks);
  EXPECT_EQ(by_ticks.arena_bytes, 128u) << "one place for all three";
  const ArenaLayout plan = ArenaLayout::build(blocks, 1, overlap);
  check_arena_layout(plan, overlap);
  EXPECT_EQ(plan.arena_bytes, 256u);
  EXPECT_NE(plan.offset[0], plan.offset[2]);
  EXPECT_THROW(check_arena_layout(by_ticks, overlap), Error) << "the tick plan breaks the relation";
  EXPECT_NO_THROW(PlannedArena(plan, overlap));
  EXPECT_THROW(PlannedArena(by_ticks, overlap), Error);
}

TEST(ArenaLayout, CheckerCatchesOverlappingLiveBlocks) {
  ArenaLayout plan = ArenaLayout::build({block(100, 0, 4), block(100, 2, 6)});
  plan.offset[1] = plan.offset[0];
  try {
    check_arena_layout(plan);
    FAIL() << "the checker accepted two live blocks at one offset";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks 0 and 1 are alive together"), std::string::npos) << e.what();
  }
  plan.offset[1] = plan.total_bytes;  // outside the reservation
  EXPECT_THROW(check_arena_layout(plan), Error);
}

TEST(ArenaLayout, RandomStepsPlanWithinPeakAndUnplannedBounds) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<PlannedBlock> blocks;
    std::uniform_int_distribution<int> size(1, 5000), length(1, 30);
    for (std::uint64_t t = 0; t < 200; t += 2)
      blocks.push_back(block(static_cast<std::size_t>(size(rng)), t, t + 1 + static_cast<std::uint64_t>(length(rng))));
    const ArenaLayout plan = ArenaLayout::build(blocks);
    check_arena_layout(plan);
    EXPECT_LE(plan.arena_bytes, plan.unplanned_bytes());
    EXPECT_GE(plan.arena_bytes, peak_live_bytes(blocks));
  }
}

TEST(PlannedMemory, RecorderSeesEachAllocationAndItsLifetime) {
  std::vector<PlannedBlock> blocks;
  {
    AllocationRecorder recorder;
    Tensor kept = Tensor::empty({10});
    { Tensor temporary = Tensor::empty({20}); }
    blocks = recorder.finish();
    ASSERT_EQ(blocks.size(), 2u);
    EXPECT_EQ(blocks[0].bytes, 40u);
    EXPECT_TRUE(blocks[0].escaped()) << "still alive when the recording finished";
    EXPECT_EQ(blocks[1].bytes, 80u);
    EXPECT_FALSE(blocks[1].escaped());
    EXPECT_EQ(peak_live_bytes(blocks), 120u);
  }
}

TEST(PlannedMemory, ARecordedStepRunsWithoutAllocatorCalls) {
  const Tensor x = input(1000);
  Tensor expected;
  auto arena = record(x, &expected);
  for (int call = 0; call < 3; ++call) {
    cpu_allocator().reset_stats();
    Tensor result;
    bool diverged;
    {
      PlannedArena::Scope scope(*arena);
      result = step(x);
      diverged = scope.diverged();
    }
    EXPECT_EQ(cpu_allocator().stats().requests, 0u) << "call " << call;
    EXPECT_FALSE(diverged);
    EXPECT_TRUE(same_values(result, expected));
  }
}

TEST(PlannedMemory, ResultsTheCallerKeepsAreNeverOverwritten) {
  const Tensor x = input(256);
  auto arena = record(x);
  std::vector<Tensor> kept;
  for (int call = 0; call < 4; ++call) {
    PlannedArena::Scope scope(*arena);
    kept.push_back(step(x));
    EXPECT_FALSE(scope.diverged()) << "holding results is not a divergence";
  }
  const Tensor expected = step(x);
  for (const Tensor& t : kept) EXPECT_TRUE(same_values(t, expected)) << "a kept result was overwritten";
}

TEST(PlannedMemory, AStepThatAllocatesDifferentlyIsCorrectAndDiverges) {
  const Tensor x = input(512), other = input(300);
  auto arena = record(x);
  {  // other sizes: from the first difference on, the allocator serves
    PlannedArena::Scope scope(*arena);
    const Tensor r = step(other);
    EXPECT_TRUE(scope.diverged());
    EXPECT_TRUE(same_values(r, step(other)));
  }
  {  // a temporary kept past the step: the next request that would share its bytes is not served there
    Tensor leaked;
    PlannedArena::Scope scope(*arena);
    leaked = kernels::mul(x, 2.0);
    const Tensor snapshot = leaked.clone();
    Tensor b = kernels::add(leaked, 1.0);
    Tensor c = kernels::mul(b, b);
    b = Tensor();
    const Tensor r = kernels::add(c, x);
    EXPECT_TRUE(scope.diverged());
    EXPECT_TRUE(same_values(leaked, snapshot)) << "a live tensor's bytes were handed out again";
  }
}

TEST(PlannedMemory, OneScopePerArenaAtATime) {
  auto arena = record(input(64));
  PlannedArena::Scope scope(*arena);
  EXPECT_THROW(PlannedArena::Scope second(*arena), Error);
}
