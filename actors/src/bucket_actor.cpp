// A bucket actor: one AllReduce bucket of the data-parallel gradient path. Gradient stages write
// their gradients straight into the bucket's slice of the step's flat buffer and say so; when the
// last is in, the bucket asks the communicator actor to reduce the buffer. Once reduced, it takes
// the bucket's squared norm (the same on every rank) and hands views of the one buffer, no copies,
// to the optimizers that own them (and to the clip actor on the naive path).
#include <algorithm>

#include "actor_kinds.hpp"
#include "handler.hpp"
#include "messages.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::actors {

namespace {

struct BucketState {
  int index = 0;
  std::uint32_t track = 0;
  PeersPtr peers;
  std::uint64_t step = 0;  // the step in progress
  std::size_t filled = 0;  // its gradients written so far
  caf::abstract_actor* self = nullptr;
  /// Counts a new step's gradients from zero (current_step).
  void start_step() { filled = 0; }
  ~BucketState() { state_closing(&self); }
  static inline const char* name = "troupe.bucket";
};
using Self = BucketActor::stateful_pointer<BucketState>;

const std::vector<BucketEntry>& entries(const BucketState& s) {
  return s.peers->gradients.buckets->buckets[static_cast<std::size_t>(s.index)];
}

// Passes the reduced gradients on: the squared norm to the program (and to the clip actor on the
// parallel path), each gradient as a view of the reduced buffer to its optimizers.
void pass_on(Self self, std::uint64_t step, const Tensor& flat) {
  BucketState& s = self->state;
  const GradientPath& path = s.peers->gradients;
  double squared_norm = 0;
  try {
    HandlerTrace trace(s.track, "compute", 0, step, -1);  // a kernel's time, as an op's
    // Taken after the reduction: identical on every rank. By entry where tensor parallelism weights
    // them; with ZeRO-1 only over this rank's reduced slice (the clip actor adds the ranks' shares).
    const auto [lo, hi] = path.zero ? path.zero->slice(static_cast<std::size_t>(s.index))
                                    : std::pair<std::int64_t, std::int64_t>{0, flat.numel()};
    bool whole = !path.zero;
    for (const BucketEntry& e : entries(s)) whole = whole && path.norm_weight[static_cast<std::size_t>(e.sink)] == 1;
    if (whole) {
      squared_norm = kernels::squared_norm(flat);
    } else {
      for (const BucketEntry& e : entries(s)) {
        const std::int64_t begin = std::max(lo, e.offset), end = std::min(hi, e.offset + shape_numel(e.shape));
        if (begin < end)
          squared_norm += path.norm_weight[static_cast<std::size_t>(e.sink)] * kernels::squared_norm(flat.slice(0, begin, end));
      }
    }
  } catch (const Error& e) {
    tell(self, s.track, s.peers->program, SendTag{"fail", step}, fail_atom::value, step, static_cast<int>(e.kind()),
         "gradient bucket " + std::to_string(s.index) + " of step " + std::to_string(step) +
             " could not take its norm: " + e.message());
    return;
  }
  tell(self, s.track, s.peers->program, SendTag{"bucket", step}, bucket_atom::value, step, s.index, squared_norm);
  if (path.clip.actor && path.clip_takes_norms)
    tell(self, s.track, path.clip, SendTag{"norm", step}, norm_atom::value, step, s.index, squared_norm);
  for (const BucketEntry& e : entries(s)) {
    const Tensor view = flat.slice(0, e.offset, e.offset + shape_numel(e.shape)).reshape(e.shape);
    const auto sink = static_cast<std::size_t>(e.sink);
    if (path.clip.actor && !path.clip_takes_norms)
      tell(self, s.track, path.clip, SendTag{"gradient", step}, gradient_atom::value, step, path.clip_slot[sink], view);
    for (int o : path.owners[sink])
      tell(self, s.track, path.optimizers[static_cast<std::size_t>(o)], SendTag{"gradient", step, -1, view.nbytes()},
           gradient_atom::value, step, e.sink, view);
  }
}

BucketActor::behavior_type bucket_actor(Self self, int index, std::uint32_t track, PeersPtr peers) {
  const ActorInit init(self);
  self->state.index = index;
  self->state.track = track;
  self->state.peers = std::move(peers);
  return {
      [=](filled_atom, const StepContextPtr& ctx, int, std::uint64_t flow) {
        Handling h(self, track, "filled", flow, ctx->step, -1);
        BucketState& s = self->state;
        if (!current_step(s, ctx->step)) return;
        if (++s.filled < entries(s).size()) return;
        const Tensor& flat = ctx->buckets[static_cast<std::size_t>(s.index)];
        tell(self, track, s.peers->gradients.communicator, SendTag{"reduce", s.step, -1, flat.nbytes()}, reduce_atom::value,
             s.step, s.index, flat);
      },
      [=](reduced_atom, std::uint64_t step, const Tensor& flat, std::uint64_t flow) {
        Handling h(self, track, "reduced", flow, step, -1);
        if (step == self->state.step) pass_on(self, step, flat);
      },
  };
}

}  // namespace

BucketActor spawn_bucket_actor(caf::actor_system& sys, int index, std::uint32_t track, PeersPtr peers) {
  spawn_released();
  return sys.spawn(bucket_actor, index, track, std::move(peers));
}

}  // namespace troupe::actors
