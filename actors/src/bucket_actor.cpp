// A bucket actor: once its AllReduce is done, it takes the reduced bucket's squared norm (the same
// on every rank) and hands the gradients, views of the one reduced buffer, to the program.
#include "actor_kinds.hpp"
#include "handler.hpp"
#include "messages.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::actors {

namespace {

struct BucketState {
  std::shared_ptr<const BucketPlan> plan;
  std::uint32_t track = 0;
  PeersPtr peers;
  caf::abstract_actor* self = nullptr;
  ~BucketState() { mailbox_acquire(self); }
  static inline const char* name = "troupe.bucket";
};

caf::behavior bucket_actor(caf::stateful_actor<BucketState>* self, std::shared_ptr<const BucketPlan> plan,
                           std::uint32_t track, PeersPtr peers) {
  spawn_acquired();
  HandlerSync init_sync(self);
  self->state.self = self;
  self->state.plan = std::move(plan);
  self->state.track = track;
  self->state.peers = std::move(peers);
  return {
      [=](reduced_atom, std::uint64_t step, int bucket, const Tensor& flat, std::uint64_t flow) {
        Handling h(self, self->state.track, "reduced", flow, step, -1);
        BucketState& st = self->state;
        // The reduced gradients are views of the one buffer: no copy back out.
        auto views = std::make_shared<std::vector<Tensor>>();
        for (const BucketEntry& e : st.plan->buckets[static_cast<std::size_t>(bucket)])
          views->push_back(flat.slice(0, e.offset, e.offset + shape_numel(e.shape)).reshape(e.shape));
        const double squared_norm = kernels::squared_norm(flat);  // taken after the reduction: identical on every rank
        tell(self, st.track, st.peers->program, SendTag{"bucket", step, -1, flat.nbytes()}, bucket_atom::value,
             step, bucket, squared_norm, TensorListPtr(std::move(views)));
      },
  };
}

}  // namespace

caf::actor spawn_bucket_actor(caf::actor_system& sys, std::shared_ptr<const BucketPlan> plan, std::uint32_t track,
                              PeersPtr peers) {
  spawn_released();
  return sys.spawn(bucket_actor, std::move(plan), track, std::move(peers));
}

}  // namespace troupe::actors
