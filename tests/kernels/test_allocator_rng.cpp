// The caching CPU allocator (reuse, alignment, statistics) and the counter-based RNG.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "kernels/reference.hpp"
#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/rng.hpp"

using namespace troupe;

TEST(CachingCpuAllocator, ReusesBlocksAndCounts) {
  CachingCpuAllocator alloc;
  void* a = alloc.allocate(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(alloc.stats().current_bytes, CachingCpuAllocator::block_size(1000));
  alloc.deallocate(a, 1000);
  EXPECT_EQ(alloc.stats().current_bytes, 0u);
  EXPECT_EQ(alloc.stats().cached_bytes, CachingCpuAllocator::block_size(1000));
  void* b = alloc.allocate(1010);  // same size class: the cached block comes back
  EXPECT_EQ(a, b);
  EXPECT_EQ(alloc.stats().system_allocations, 1u);
  EXPECT_EQ(alloc.stats().requests, 2u);
  void* c = alloc.allocate(1 << 20);
  EXPECT_EQ(alloc.stats().system_allocations, 2u);
  const std::size_t peak = alloc.stats().peak_bytes;
  EXPECT_EQ(peak, CachingCpuAllocator::block_size(1010) + CachingCpuAllocator::block_size(1 << 20));
  alloc.deallocate(c, 1 << 20);
  alloc.deallocate(b, 1010);
  EXPECT_EQ(alloc.stats().peak_bytes, peak);
  alloc.reset_stats();
  EXPECT_EQ(alloc.stats().peak_bytes, 0u);
  EXPECT_EQ(alloc.stats().system_allocations, 0u);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().cached_bytes, 0u);
}

TEST(CachingCpuAllocator, SizeClassesBoundSlack) {
  for (std::size_t n : {1u, 63u, 64u, 65u, 511u, 513u, 4097u, 1000000u, 123456789u}) {
    const std::size_t b = CachingCpuAllocator::block_size(n);
    EXPECT_GE(b, n);
    EXPECT_EQ(b % 64, 0u) << n;
    EXPECT_LE(b, n + n / 4 + 64) << n;
  }
}

TEST(CachingCpuAllocator, TensorsReuseAcrossSteps) {
  auto& alloc = cpu_allocator();
  { Tensor warm = Tensor::empty({256, 256}); }
  alloc.reset_stats();
  for (int step = 0; step < 5; ++step) Tensor t = Tensor::empty({256, 256});
  EXPECT_EQ(alloc.stats().system_allocations, 0u);
  EXPECT_EQ(alloc.stats().requests, 5u);
}

TEST(CachingCpuAllocator, ThreadSafe) {
  CachingCpuAllocator alloc;
  auto work = [&] {
    for (int i = 0; i < 2000; ++i) {
      void* p = alloc.allocate(64 * (1 + i % 7));
      alloc.deallocate(p, 64 * (1 + i % 7));
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  EXPECT_EQ(alloc.stats().current_bytes, 0u);
  EXPECT_EQ(alloc.stats().requests, 4000u);
}

TEST(Philox, KnownAnswer) {
  // Known-answer vectors of the Random123 reference implementation (philox4x32-10).
  auto r = philox4x32({0, 0, 0, 0}, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
  r = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822ull | (0x299f31d0ull << 32));
  EXPECT_EQ(r[0], 0xd16cfe09u);
  EXPECT_EQ(r[1], 0x94fdccebu);
  EXPECT_EQ(r[2], 0x5001e420u);
  EXPECT_EQ(r[3], 0x24126ea1u);
}

TEST(Generator, DeterministicAndStatisticallySane) {
  Generator g1(7), g2(7);
  Tensor a = Tensor::empty({1000, 10}), b = Tensor::empty({1000, 10});
  g1.uniform_(a);
  g2.uniform_(b);
  EXPECT_EQ(test::values(a), test::values(b));
  g1.uniform_(b);
  EXPECT_NE(test::values(a), test::values(b));  // the stream moved on
  double mean = 0, sq = 0;
  Tensor n = Tensor::empty({100000});
  Generator(3).normal_(n, 2.0, 0.5);
  for (double v : test::values(n)) mean += v, sq += v * v;
  mean /= 1e5;
  const double var = sq / 1e5 - mean * mean;
  EXPECT_NEAR(mean, 2.0, 0.01);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.01);
  for (double v : test::values(a)) ASSERT_TRUE(v >= 0.0 && v < 1.0);
}

TEST(Generator, OffsetRestoresTheStream) {
  Generator g(11);
  Tensor skip = Tensor::empty({37});
  g.uniform_(skip);
  const auto offset = g.offset();
  Tensor x = Tensor::empty({50}), y = Tensor::empty({50});
  g.uniform_(x);
  Generator h(11);
  h.set_offset(offset);
  h.uniform_(y);
  EXPECT_EQ(test::values(x), test::values(y));
  // Fills of strided views land in element order, identical to a dense fill.
  Tensor base = Tensor::empty({50, 2});
  Tensor col = base.slice(1, 0, 1).squeeze(1);
  h.set_offset(offset);
  h.uniform_(col);
  EXPECT_EQ(test::values(col), test::values(x));
  Tensor i = Tensor::empty({3}, DType::i32);
  EXPECT_THROW(g.uniform_(i), Error);
}
