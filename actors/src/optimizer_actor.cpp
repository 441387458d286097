// An optimizer actor: the end of its parameters' gradient path. It collects their final gradients
// (from the gradient stages, or reduced from the buckets), scales them by the clip coefficient,
// and once the program allows it (the step's compute is over, so nothing reads the parameters)
// runs its optimizer and hands the gradients it used to the program. Without optimizers one such
// actor only collects (and clips) the gradients the step returns.
#include "actor_kinds.hpp"
#include "handler.hpp"
#include "messages.hpp"
#include "troupe/kernels/elementwise.hpp"

namespace troupe::actors {

namespace {

struct OptimizerState {
  OptimizerSetup setup;
  // The step in progress: what has arrived.
  std::uint64_t step = 0;
  std::map<std::string, Tensor> gradients;
  int gradients_in = 0, scales_in = 0, updates_in = 0;
  double scale = 1.0;
  caf::abstract_actor* self = nullptr;
  /// Clears what arrived for a new step (current_step).
  void start_step() {
    gradients.clear();
    gradients_in = scales_in = updates_in = 0;
    scale = 1.0;
  }
  ~OptimizerState() { state_closing(&self); }
  static inline const char* name = "troupe.optimizer";
};
using Self = OptimizerActor::stateful_pointer<OptimizerState>;


// Scales and applies the gradients; a troupe::Error names the step and what failed.
void apply(OptimizerState& s) {
  try {
    if (s.scale != 1.0)
      for (auto& [name, g] : s.gradients) g = kernels::mul(g, s.scale);  // out of place: gradients may share storage
  } catch (const Error& e) {
    throw Error(e.kind(), "gradient clipping failed in step " + std::to_string(s.step) + ": " + e.message());
  }
  if (!s.setup.optimizer) return;
  try {
    // The step owns the parameters' grad() for the update, then leaves them empty.
    for (const graph::Var& p : s.setup.optimizer->parameters()) {
      auto it = s.gradients.find(p.name());
      if (it == s.gradients.end()) p.zero_grad();
      else p.set_grad(it->second);
    }
    s.setup.optimizer->step();
    s.setup.optimizer->zero_grad();
  } catch (const Error& e) {
    throw Error(e.kind(), "optimizer " + std::to_string(s.setup.index) + " failed in step " + std::to_string(s.step) +
                              ": " + e.message());
  }
}

// Updates once every gradient, the clip coefficient (when clipping) and the program's go are in.
void update_if_ready(Self self) {
  OptimizerState& s = self->state;
  const AddressOf<ProgramActor>& program = s.setup.peers->program;
  if (s.gradients_in < s.setup.gradients || s.scales_in < (s.setup.clipping ? 1 : 0) || s.updates_in < 1) return;
  try {
    apply(s);
  } catch (const Error& e) {
    tell(self, s.setup.track, program, SendTag{"fail", s.step}, fail_atom::value, s.step, static_cast<int>(e.kind()),
         e.message());
    return;
  }
  auto used = std::make_shared<const std::map<std::string, Tensor>>(std::move(s.gradients));
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
      [=](clip_atom, std::uint64_t step, double scale, std::uint64_t flow) {
        Handling h(self, track, "clip", flow, step, -1);
        if (!current_step(self->state, step)) return;
        self->state.scale = scale;
        ++self->state.scales_in;
        update_if_ready(self);
      },
      [=](update_atom, std::uint64_t step, std::uint64_t flow) {
        Handling h(self, track, "update", flow, step, -1);
        if (!current_step(self->state, step)) return;
        ++self->state.updates_in;
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
