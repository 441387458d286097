#pragma once
// The one order in which every device of a group runs the acts of its collective ops (OpDef::
// collective) when a step has several micro-batches. Each device's collectives form a chain per
// micro-batch (graph/spmd.hpp), but the chains of different micro-batches are independent, and an
// actor program may run them interleaved in any way: two devices could meet in different
// collectives. So each act waits for a `go` from the act before it in this order, which every
// device computes alike: the micro-batches in waves of `registers` (an actor's output registers),
// and within a wave the chain position first, then the micro-batch, so micro-batch k + 1 computes
// up to its next collective while micro-batch k's is on the wire. A wave never waits for a
// register a later micro-batch holds, and each act's predecessor depends on nothing after it, so
// the order cannot deadlock.

#include <optional>
#include <utility>

namespace troupe::actors {

/// The order of the acts (chain position, micro-batch) of `chain` collectives over `micro_batches`.
class CollectiveOrder {
 public:
  CollectiveOrder(int chain, int micro_batches, int registers);
  /// Whether act (position, mb) waits for the act before it (all but the first).
  bool waits(int position, int mb) const { return position > 0 || mb > 0; }
  /// The act after (position, mb), or none for the last.
  std::optional<std::pair<int, int>> next(int position, int mb) const;

 private:
  int chain_, micro_batches_, wave_;
};

}  // namespace troupe::actors
