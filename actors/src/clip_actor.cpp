// The clip actor: global-norm gradient clipping as its own step. It gathers one partial squared
// norm per slot (a gradient, or a reduced bucket) or, on the naive path, the gradients themselves;
// once all are in it sums them in slot order, never arrival order, so the norm is the same from
// run to run and on every rank, and tells the program the norm and the optimizers the coefficient.
#include <cmath>

#include "actor_kinds.hpp"
#include "handler.hpp"
#include "messages.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

namespace {

struct ClipState {
  ClipSetup setup;
  // The step in progress: what has arrived per slot.
  std::uint64_t step = 0;
  std::vector<double> norms;
  std::vector<Tensor> gradients;
  int in = 0;
  caf::abstract_actor* self = nullptr;
  /// Clears the slots for a new step (current_step).
  void start_step() {
    norms.assign(static_cast<std::size_t>(setup.slots), 0.0);
    gradients.assign(setup.takes_norms ? 0 : static_cast<std::size_t>(setup.slots), Tensor());
    in = 0;
  }
  ~ClipState() { state_closing(&self); }
  static inline const char* name = "troupe.clip";
};
using Self = ClipActor::stateful_pointer<ClipState>;


// The global norm, once every slot is in.
double global_norm(const ClipState& s) {
  double total = 0;
  if (s.setup.takes_norms)
    for (double n : s.norms) total += n;
  else
    for (std::size_t k = 0; k < s.gradients.size(); ++k)  // the textbook pass, after backward
      total += s.setup.weights[k] * kernels::squared_norm(s.gradients[k]);
  for (const auto& group : s.setup.norms) {  // each device's sum counts its shards or slices, the group adds them
    const Tensor sum = Tensor::from_vector(std::vector<double>{total}, {1});
    group->submit([&](transport::ProcessGroup& g) { g.all_reduce(sum); }).get();
    total = sum.item();
  }
  return std::sqrt(total);
}

// Counts one slot; after the last, tells the program the norm and the optimizers the coefficient.
void slot_in(Self self) {
  ClipState& s = self->state;
  if (++s.in < s.setup.slots) return;
  const AddressOf<ProgramActor>& program = s.setup.peers->program;
  double norm = 0;
  try {
    norm = global_norm(s);
  } catch (const Error& e) {
    tell(self, s.setup.track, program, SendTag{"fail", s.step}, fail_atom::value, s.step, static_cast<int>(e.kind()),
         "gradient clipping failed in step " + std::to_string(s.step) + ": " + e.message());
    return;
  }
  s.gradients.clear();
  // Loss scaling: the gradients are the scale times the true ones; it comes out before clipping.
  const double loss_scale = s.setup.scaler ? s.setup.scaler->scale() : 1.0;
  norm /= loss_scale;
  const bool skip = s.setup.scaler && !std::isfinite(norm);
  tell(self, s.setup.track, program, SendTag{"clipped", s.step}, clipped_atom::value, s.step, norm);
  const double clip = s.setup.max_norm > 0 && !skip ? kernels::clip_coefficient(norm, s.setup.max_norm) : 1.0;
  for (const auto& o : s.setup.peers->gradients.optimizers)
    tell(self, s.setup.track, o, SendTag{"clip", s.step}, clip_atom::value, s.step, clip / loss_scale, skip);
}

ClipActor::behavior_type clip_actor(Self self, ClipSetup setup) {
  const ActorInit init(self);
  self->state.setup = std::move(setup);
  const std::uint32_t track = self->state.setup.track;
  return {
      [=](norm_atom, std::uint64_t step, int slot, double squared_norm, std::uint64_t flow) {
        Handling h(self, track, "norm", flow, step, -1);
        if (!current_step(self->state, step)) return;
        self->state.norms.at(static_cast<std::size_t>(slot)) = squared_norm;
        slot_in(self);
      },
      [=](gradient_atom, std::uint64_t step, int slot, const Tensor& gradient, std::uint64_t flow) {
        Handling h(self, track, "gradient", flow, step, -1);
        if (!current_step(self->state, step)) return;
        self->state.gradients.at(static_cast<std::size_t>(slot)) = gradient;
        slot_in(self);
      },
  };
}

}  // namespace

ClipActor spawn_clip_actor(caf::actor_system& sys, ClipSetup setup) {
  spawn_released();
  return sys.spawn(clip_actor, std::move(setup));
}

}  // namespace troupe::actors
