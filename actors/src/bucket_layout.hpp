#pragma once
// The data-parallel gradient path's plan: which gradients go into which AllReduce bucket, in an
// order every rank agrees on. The bucket actors are bucket_actor.cpp's.

#include <cstdint>
#include <vector>

#include "actor_graph.hpp"

namespace troupe::actors {

/// One gradient's place in a bucket.
struct BucketEntry {
  int sink = -1;              // sink index of the gradient
  std::int64_t offset = 0;    // element offset in the bucket's flat buffer
  Shape shape;
};

/// The buckets of a program, in submission order (the same on every rank).
struct BucketLayout {
  std::vector<std::vector<BucketEntry>> buckets;
  std::vector<int> bucket_of_sink;  // -1 for outputs that are not gradients
  std::vector<std::int64_t> numel;  // per bucket: its buffer's elements (its gradients', padded)
};

/// Packs the gradient sinks in reverse parameter order (the order backward finishes them) into
/// buckets: the first up to `first_bytes`, the others up to `fusion_bytes` (a gradient larger than
/// the limit gets a bucket of its own). `fusion_bytes` 0: one bucket per gradient. Each bucket's
/// buffer is padded to a multiple of `shards` elements (ZeRO-1 gives each rank an equal slice).
BucketLayout layout_buckets(const ActorGraph& plan, const graph::TracedFunction& fn, std::size_t first_bytes,
                        std::size_t fusion_bytes, int shards = 1);

}  // namespace troupe::actors
