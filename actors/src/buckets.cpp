#include "buckets.hpp"

#include <caf/all.hpp>

#include <algorithm>

#include "trace_hooks.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::actors {

BucketPlan plan_buckets(const ActorPlan& plan, const graph::TracedFunction& fn, std::size_t first_bytes,
                        std::size_t fusion_bytes) {
  BucketPlan b;
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
  return b;
}

namespace {

struct BucketState {
  std::shared_ptr<const BucketPlan> plan;
  std::uint32_t trace_id = 0;
  PeersPtr peers;
  caf::abstract_actor* self = nullptr;
  ~BucketState() { mailbox_acquire(self); }
  static inline const char* name = "troupe.bucket";
};

caf::behavior bucket_actor(caf::stateful_actor<BucketState>* self, std::shared_ptr<const BucketPlan> plan,
                           std::uint32_t trace_id, PeersPtr peers) {
  spawn_acquired();
  HandlerSync init_sync(self);
  self->state.self = self;
  self->state.plan = std::move(plan);
  self->state.trace_id = trace_id;
  self->state.peers = std::move(peers);
  return {
      [=](reduced_atom, std::uint64_t step, int bucket, const Tensor& flat, std::uint64_t flow) {
        HandlerSync sync(self);
        BucketState& st = self->state;
        HandlerTrace trace(st.trace_id, "reduced", flow, step, -1);
        // The reduced gradients are views of the one buffer: no copy back out.
        auto views = std::make_shared<std::vector<Tensor>>();
        for (const BucketEntry& e : st.plan->buckets[static_cast<std::size_t>(bucket)])
          views->push_back(flat.slice(0, e.offset, e.offset + shape_numel(e.shape)).reshape(e.shape));
        const double squared_norm = ops::squared_norm(flat);  // taken after the reduction: identical on every rank
        const std::uint32_t program = st.peers->trace_ids.back();
        const std::uint64_t f = trace_send(st.trace_id, program, "bucket", step, -1, flat.nbytes());
        post(self, st.peers->program, bucket_atom::value, step, bucket, squared_norm, TensorListPtr(std::move(views)), f);
      },
  };
}

}  // namespace

caf::actor spawn_bucket_actor(caf::actor_system& sys, std::shared_ptr<const BucketPlan> plan, std::uint32_t trace_id,
                              PeersPtr peers) {
  spawn_released();
  return sys.spawn(bucket_actor, std::move(plan), trace_id, std::move(peers));
}

}  // namespace troupe::actors
