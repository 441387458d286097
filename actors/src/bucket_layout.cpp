#include "bucket_layout.hpp"

#include <algorithm>

#include "troupe/kernels/error.hpp"

namespace troupe::actors {

BucketLayout layout_buckets(const ActorGraph& plan, const graph::TracedFunction& fn, std::size_t first_bytes,
                        std::size_t fusion_bytes, int shards) {
  BucketLayout b;
  b.bucket_of_sink.assign(plan.sinks.size(), -1);
  std::vector<int> grads;  // sink indices, latest parameter first
  for (std::size_t k = 0; k < plan.sinks.size(); ++k)
    if (plan.sink_param[k] >= 0) grads.push_back(static_cast<int>(k));
  std::sort(grads.begin(), grads.end(), [&](int x, int y) { return plan.sink_param[x] > plan.sink_param[y]; });
  std::size_t bytes = 0;
  for (int k : grads) {
    const graph::Var& p = fn.parameters()[static_cast<std::size_t>(plan.sink_param[static_cast<std::size_t>(k)])];
    TROUPE_CHECK(p.dtype() == DType::f32, dtype_mismatch, "data parallel: parameter '", p.name(), "' is ",
                 dtype_name(p.dtype()), "; gradient buckets are f32");
    const Shape shape = p.tensor().shape();
    const std::size_t size = static_cast<std::size_t>(shape_numel(shape)) * sizeof(float);
    const std::size_t limit = b.buckets.size() <= 1 ? first_bytes : fusion_bytes;
    if (b.buckets.empty() || fusion_bytes == 0 || bytes + size > limit) {
      b.buckets.emplace_back();
      b.numel.push_back(0);
      bytes = 0;
    }
    b.buckets.back().push_back({k, b.numel.back(), shape});
    b.numel.back() += shape_numel(shape);
    b.bucket_of_sink[static_cast<std::size_t>(k)] = static_cast<int>(b.buckets.size()) - 1;
    bytes += size;
  }
  for (std::int64_t& n : b.numel) n = (n + shards - 1) / shards * shards;
  return b;
}

}  // namespace troupe::actors
