// The clip actor: global-norm gradient clipping as its own step. It gathers one partial squared
// norm per slot (a gradient, or a reduced bucket) or, on the naive path, the gradients themselves;
// once all are in it sums them in slot order, never arrival order, so the norm is the same from
// run to run and on every rank; the sums over the tensor-parallel and ZeRO-1 groups run on their
// communicators' threads and come back as a message; then it tells the program the norm and the
// optimizers the coefficient.
#include <cmath>

#include "actor_kinds.hpp"
#include "handler.hpp"
#include "messages.hpp"
#include "trace_hooks.hpp"
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

// Fails the step: the clip could not take the norm.
void clip_failed(Self self, const Error& e) {
  ClipState& s = self->state;
  tell(self, s.setup.track, s.setup.peers->program, SendTag{"fail", s.step}, fail_atom::value, s.step,
       static_cast<int>(e.kind()), "gradient clipping failed in step " + std::to_string(s.step) + ": " + e.message());
}


// This device's squared norm, once every slot is in.
double local_squared_norm(const ClipState& s) {
  HandlerTrace trace(s.setup.track, "compute", 0, s.step, -1);  // a kernel's time, as an op's
  double total = 0;
  if (s.setup.takes_norms)
    for (double n : s.norms) total += n;
  else
    for (std::size_t k = 0; k < s.gradients.size(); ++k)  // the textbook pass, after backward
      total += s.setup.weights[k] * kernels::squared_norm(s.gradients[k]);
  return total;
}

// Adds up `total` over groups[k], then the groups after it, each on its communicator's thread (each
// device's sum counts its shards or slices, the group adds them); the last tells the clip actor.
void sum_over_groups(std::vector<std::shared_ptr<transport::Communicator>> groups, std::size_t k, double total,
                     std::uint64_t step, AddressOf<ClipActor> clip, std::uint32_t track) {
  if (k == groups.size()) {
    tell_from_outside(track, clip, SendTag{"summed", step}, summed_atom::value, step, total, std::exception_ptr());
    return;
  }
  const Tensor sum = Tensor::from_vector(std::vector<double>{total}, {1});
  const std::shared_ptr<transport::Communicator> group = groups[k];
  const std::uint64_t flow = trace_send(clip.track, track, "norm sum", step, -1, sum.nbytes());
  group->submit(
      [sum, track, flow, step](transport::ProcessGroup& g) {
        HandlerTrace span(track, "norm sum", flow, step, -1);
        g.all_reduce(sum);
      },
      [groups = std::move(groups), k, sum, step, clip, track](std::exception_ptr e) {
        if (e) return tell_from_outside(track, clip, SendTag{"summed", step}, summed_atom::value, step, 0.0, e);
        sum_over_groups(groups, k + 1, sum.item(), step, clip, track);
      });
}

// Counts one slot; after the last, sums the norm over the groups, whose answer ends the clip (summed).
void slot_in(Self self) {
  ClipState& s = self->state;
  if (++s.in < s.setup.slots) return;
  double total = 0;
  try {
    total = local_squared_norm(s);
  } catch (const Error& e) {
    return clip_failed(self, e);
  }
  s.gradients.clear();
  sum_over_groups(s.setup.norms, 0, total, s.step, {caf::actor_cast<ClipActor>(self), s.setup.track}, s.setup.norms_track);
}

// The global norm is in: tells the program the norm and the optimizers the coefficient.
void clip(Self self, double squared_norm) {
  ClipState& s = self->state;
  const AddressOf<ProgramActor>& program = s.setup.peers->program;
  double norm = std::sqrt(squared_norm);
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
      [=](summed_atom, std::uint64_t step, double squared_norm, const std::exception_ptr& error, std::uint64_t flow) {
        Handling h(self, track, "summed", flow, step, -1);
        if (!current_step(self->state, step)) return;
        if (!error) return clip(self, squared_norm);
        try {
          std::rethrow_exception(error);
        } catch (const Error& e) {
          clip_failed(self, e);
        } catch (const std::exception& e) {
          clip_failed(self, Error(ErrorKind::runtime, e.what()));
        }
      },
  };
}

}  // namespace

ClipActor spawn_clip_actor(caf::actor_system& sys, ClipSetup setup) {
  spawn_released();
  return sys.spawn(clip_actor, std::move(setup));
}

}  // namespace troupe::actors
