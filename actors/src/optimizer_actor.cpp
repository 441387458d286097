// An optimizer actor: the end of its parameters' gradient path. It collects their final gradients
// (from the gradient stages, or reduced from the buckets), scales them by the clip coefficient,
// and once the program allows it (the step's compute is over, so nothing reads the parameters)
// runs its optimizer and hands the gradients it used to the program. Without optimizers one such
// actor only collects (and clips) the gradients the step returns.
#include "actor_kinds.hpp"
#include "handler.hpp"
#include "messages.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::actors {

namespace {

struct OptimizerState {
  OptimizerSetup setup;
  // The step in progress: what has arrived.
  std::uint64_t step = 0;
  std::map<std::string, Tensor> gradients;
  int gradients_in = 0, scales_in = 0, updates_in = 0;
  double scale = 1.0;
  bool skip = false;  // loss scaling found an Inf or NaN gradient: no update this step
  enum class Gathered { unasked, waiting, written } gathered = Gathered::unasked;  // ZeRO-1: the last all-gather
  caf::abstract_actor* self = nullptr;
  /// Clears what arrived for a new step (current_step).
  void start_step() {
    gradients.clear();
    gradients_in = scales_in = updates_in = 0;
    scale = 1.0;
    skip = false;
    gathered = Gathered::unasked;
  }
  ~OptimizerState() { state_closing(&self); }
  static inline const char* name = "troupe.optimizer";
};
using Self = OptimizerActor::stateful_pointer<OptimizerState>;

// Scales the gradients by `scale` in place, each piece of memory once: two gradients may be one
// tensor (a value the graph hands to two parameters), and with data parallelism all are slices of
// bucket buffers. A gradient that partly overlaps another is scaled into a copy of its own.
void scale_gradients(std::map<std::string, Tensor>& gradients, double scale) {
  std::vector<const Tensor*> scaled;
  for (auto& [name, g] : gradients) {
    const auto* begin = static_cast<const char*>(g.raw_data());
    const auto* end = begin + g.nbytes();
    bool same = false, overlapping = !g.is_contiguous();
    for (const Tensor* other : scaled) {
      const auto* b = static_cast<const char*>(other->raw_data());
      if (b == begin && other->shape() == g.shape() && other->dtype() == g.dtype() && other->is_contiguous())
        same = true;
      else if (b < end && begin < b + other->nbytes())
        overlapping = true;
    }
    if (same) continue;
    if (overlapping) {
      g = kernels::mul(g, scale);
      continue;
    }
    kernels::scale_(g, scale);
    scaled.push_back(&g);
  }
}

// Scales and applies the gradients; a troupe::Error names the step and what failed. The optimizer's
// kernels scale the gradients as they read them, with the bits of scaling them first, unless the
// scaled gradients are wanted too: returned to the program, or handed to ZeRO-1's step.
void apply(OptimizerState& s) {
  HandlerTrace trace(s.setup.track, "compute", 0, s.step, -1);  // the update's kernels, traced as an op's
  const bool in_update = s.setup.optimizer && !s.setup.zero && !s.setup.returns && !s.skip;
  try {
    if (s.scale != 1.0 && !in_update) scale_gradients(s.gradients, s.scale);
  } catch (const Error& e) {
    throw Error(e.kind(), "gradient clipping failed in step " + std::to_string(s.step) + ": " + e.message());
  }
  if (!s.setup.optimizer || s.skip) return;
  try {
    if (s.setup.zero) return s.setup.zero->step(s.gradients);
    // The step owns the parameters' grad() for the update, then leaves them empty.
    for (const graph::Var& p : s.setup.optimizer->parameters()) {
      auto it = s.gradients.find(p.name());
      if (it == s.gradients.end()) p.zero_grad();
      else p.set_grad(it->second);
    }
    s.setup.optimizer->step(in_update ? s.scale : 1.0);
    s.setup.optimizer->zero_grad();
  } catch (const Error& e) {
    throw Error(e.kind(), "optimizer " + std::to_string(s.setup.index) + " failed in step " + std::to_string(s.step) +
                              ": " + e.message());
  }
}

// ZeRO-1: whether the last step's all-gather, which writes the pieces this update writes, is over;
// otherwise the actor is told by a message when it is. Throws the all-gather's failure.
bool pieces_written(Self self) {
  OptimizerState& s = self->state;
  if (!s.setup.zero || s.gathered == OptimizerState::Gathered::written) return true;
  if (s.gathered == OptimizerState::Gathered::waiting) return false;
  const AddressOf<OptimizerActor> me{caf::actor_cast<OptimizerActor>(self), s.setup.track};
  const std::uint64_t step = s.step;
  const bool written = s.setup.zero->when_settled([me, step, track = s.setup.zero->track()](std::exception_ptr e) {
    tell_from_outside(track, me, SendTag{"gathered", step}, gathered_atom::value, step, e);
  });
  s.gathered = written ? OptimizerState::Gathered::written : OptimizerState::Gathered::waiting;
  return written;
}

// Updates once every gradient, the clip coefficient (when clipping) and the program's go are in
// (and, with ZeRO-1, the last all-gather is over).
void update_if_ready(Self self) {
  OptimizerState& s = self->state;
  const AddressOf<ProgramActor>& program = s.setup.peers->program;
  if (s.gradients_in < s.setup.gradients || s.scales_in < (s.setup.clipping ? 1 : 0) || s.updates_in < 1) return;
  try {
    if (!pieces_written(self)) return;
    apply(s);
  } catch (const Error& e) {
    tell(self, s.setup.track, program, SendTag{"fail", s.step}, fail_atom::value, s.step, static_cast<int>(e.kind()),
         e.message());
    return;
  }
  // Not returned, the gradients die here, and their memory is free before the step ends.
  auto used = std::make_shared<const std::map<std::string, Tensor>>(
      s.setup.returns ? std::move(s.gradients) : std::map<std::string, Tensor>{});
  s.gradients.clear();
  tell(self, s.setup.track, program, SendTag{"applied", s.step}, applied_atom::value, s.step, s.setup.index,
       GradientMapPtr(std::move(used)));
}

OptimizerActor::behavior_type optimizer_actor(Self self, OptimizerSetup setup) {
  const ActorInit init(self);
  self->state.setup = std::move(setup);
  const std::uint32_t track = self->state.setup.track;
  return {
      [=](gradient_atom, std::uint64_t step, int sink, const Tensor& gradient, std::uint64_t flow) {
        Handling h(self, track, "gradient", flow, step, -1);
        OptimizerState& s = self->state;
        if (!current_step(s, step)) return;
        s.gradients[s.setup.names->at(static_cast<std::size_t>(sink))] = gradient;
        ++s.gradients_in;
        update_if_ready(self);
      },
      [=](clip_atom, std::uint64_t step, double scale, bool skip, std::uint64_t flow) {
        Handling h(self, track, "clip", flow, step, -1);
        if (!current_step(self->state, step)) return;
        self->state.scale = scale;
        self->state.skip = skip;
        ++self->state.scales_in;
        update_if_ready(self);
      },
      [=](update_atom, std::uint64_t step, std::uint64_t flow) {
        Handling h(self, track, "update", flow, step, -1);
        if (!current_step(self->state, step)) return;
        ++self->state.updates_in;
        update_if_ready(self);
      },
      // (a failure is the next when_settled's to throw)
      [=](gathered_atom, std::uint64_t step, const std::exception_ptr&, std::uint64_t flow) {
        Handling h(self, track, "gathered", flow, step, -1);
        if (!current_step(self->state, step)) return;
        self->state.gathered = OptimizerState::Gathered::unasked;
        update_if_ready(self);
      },
  };
}

}  // namespace

OptimizerActor spawn_optimizer_actor(caf::actor_system& sys, OptimizerSetup setup) {
  spawn_released();
  return sys.spawn(optimizer_actor, std::move(setup));
}

}  // namespace troupe::actors
