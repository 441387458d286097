// The one order of the collectives' acts (actors/src/collective_order.hpp), without CAF: following
// next() from the first act visits every (chain position, micro-batch) once; each micro-batch's
// chain keeps its order and each collective its micro-batches'; the micro-batches interleave in
// waves of the registers, so no act waits for a micro-batch a register holds back.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "collective_order.hpp"

namespace troupe::actors {
namespace {

std::vector<std::pair<int, int>> walk(const CollectiveOrder& order) {
  std::vector<std::pair<int, int>> acts{{0, 0}};
  while (const auto next = order.next(acts.back().first, acts.back().second)) acts.push_back(*next);
  return acts;
}

TEST(CollectiveOrder, InterleavesTheMicroBatchesInWavesOfTheRegisters) {
  using Acts = std::vector<std::pair<int, int>>;
  EXPECT_EQ(walk(CollectiveOrder(3, 1, 2)), (Acts{{0, 0}, {1, 0}, {2, 0}}));
  EXPECT_EQ(walk(CollectiveOrder(2, 2, 2)), (Acts{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  EXPECT_EQ(walk(CollectiveOrder(2, 3, 2)), (Acts{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {1, 2}}));
  for (const auto& [chain, micro_batches, registers] : {std::tuple{5, 7, 2}, std::tuple{4, 6, 3}, std::tuple{1, 4, 1}}) {
    const CollectiveOrder order(chain, micro_batches, registers);
    const Acts acts = walk(order);
    EXPECT_EQ(acts.size(), static_cast<std::size_t>(chain * micro_batches));
    const std::set<std::pair<int, int>> distinct(acts.begin(), acts.end());
    EXPECT_EQ(distinct.size(), acts.size());
    std::vector<int> position_of_mb(static_cast<std::size_t>(micro_batches), -1), mb_of_position(static_cast<std::size_t>(chain), -1);
    for (std::size_t k = 0; k < acts.size(); ++k) {
      const auto [position, mb] = acts[k];
      EXPECT_EQ(order.waits(position, mb), k > 0);
      EXPECT_EQ(position_of_mb[static_cast<std::size_t>(mb)], position - 1) << "a micro-batch's chain in order";
      EXPECT_EQ(mb_of_position[static_cast<std::size_t>(position)], mb - 1) << "a collective's micro-batches in order";
      // Micro-batch mb - registers has passed every collective already: its registers are free.
      if (mb - registers >= 0) {
        EXPECT_EQ(position_of_mb[static_cast<std::size_t>(mb - registers)], chain - 1) << "act " << k;
      }
      position_of_mb[static_cast<std::size_t>(mb)] = position;
      mb_of_position[static_cast<std::size_t>(position)] = mb;
    }
  }
}

}  // namespace
}  // namespace troupe::actors
