#include "collective_order.hpp"

#include <algorithm>

#include "troupe/kernels/error.hpp"

namespace troupe::actors {

CollectiveOrder::CollectiveOrder(int chain, int micro_batches, int registers)
    : chain_(chain), micro_batches_(micro_batches), wave_(std::max(1, registers)) {
  TROUPE_CHECK(chain >= 0 && micro_batches >= 1, invalid_argument, "collective order: ", chain, " collectives, ",
               micro_batches, " micro-batches");
}

std::optional<std::pair<int, int>> CollectiveOrder::next(int position, int mb) const {
  const int first = mb / wave_ * wave_, end = std::min(first + wave_, micro_batches_);
  if (mb + 1 < end) return std::pair{position, mb + 1};
  if (position + 1 < chain_) return std::pair{position + 1, first};
  if (end < micro_batches_) return std::pair{0, end};
  return std::nullopt;
}

}  // namespace troupe::actors
