// An optimizer actor: applies one optimizer to its parameters once the step's gradients are final
// (reduced, clipped), then reports to the program.
#include "actor_kinds.hpp"
#include "handler.hpp"
#include "messages.hpp"

namespace troupe::actors {

namespace {

struct OptimizerState {
  std::shared_ptr<graph::Optimizer> optimizer;
  int index = 0;
  std::uint32_t track = 0;
  PeersPtr peers;
  caf::abstract_actor* self = nullptr;
  ~OptimizerState() { mailbox_acquire(self); }
  static inline const char* name = "troupe.optimizer";
};

caf::behavior optimizer_actor(caf::stateful_actor<OptimizerState>* self, std::shared_ptr<graph::Optimizer> optimizer,
                              int index, std::uint32_t track, PeersPtr peers) {
  spawn_acquired();
  HandlerSync init_sync(self);  // what init writes is published like a handler's writes
  OptimizerState& st = self->state;
  st.self = self;
  st.optimizer = std::move(optimizer);
  st.index = index;
  st.track = track;
  st.peers = std::move(peers);
  return {
      [=](apply_atom, std::uint64_t step, const GradientMapPtr& grads, std::uint64_t flow) {
        Handling h(self, self->state.track, "apply", flow, step, -1);
        OptimizerState& s = self->state;
        const Address program = s.peers->program;
        try {
          // The step owns the parameters' grad() for the update, then leaves them empty.
          for (const graph::Var& p : s.optimizer->parameters()) {
            auto it = grads->find(p.name());
            if (it == grads->end()) p.zero_grad();
            else p.set_grad(it->second);
          }
          s.optimizer->step();
          s.optimizer->zero_grad();
        } catch (const Error& e) {
          tell(self, s.track, program, SendTag{"fail", step}, fail_atom::value, step, static_cast<int>(e.kind()),
               "optimizer " + std::to_string(s.index) + " failed in step " + std::to_string(step) + ": " + e.message());
          return;
        }
        tell(self, s.track, program, SendTag{"applied", step}, applied_atom::value, step, s.index);
      },
  };
}

}  // namespace

caf::actor spawn_optimizer_actor(caf::actor_system& sys, std::shared_ptr<graph::Optimizer> optimizer, int index,
                                 std::uint32_t track, PeersPtr peers) {
  spawn_released();
  return sys.spawn(optimizer_actor, std::move(optimizer), index, track, std::move(peers));
}

}  // namespace troupe::actors
