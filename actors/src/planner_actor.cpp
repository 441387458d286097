// The planner actor (troupe/actors/planner.hpp): one actor that answers mesh searches with the
// CAF-free search of the plan layer (troupe/plan/mesh_search.hpp).
#include "engine_impl.hpp"
#include "handler.hpp"
#include "troupe/actors/planner.hpp"
#include "troupe/actors/tracer.hpp"

namespace troupe::actors {

/// A question and where its answer goes.
struct Asked {
  plan::MeshSearch question;
  std::promise<std::vector<plan::MeshCandidate>> answer;
};
using AskedPtr = std::shared_ptr<Asked>;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::AskedPtr)

namespace troupe::actors {

namespace {

using ask_atom = caf::atom_constant<caf::atom("ask")>;
using PlannerActor = caf::typed_actor<caf::reacts_to<ask_atom, AskedPtr, std::uint64_t>>;

struct PlannerState {
  caf::abstract_actor* self = nullptr;
  ~PlannerState() { state_closing(&self); }
  static inline const char* name = "troupe.planner";
};

PlannerActor::behavior_type planner_actor(PlannerActor::stateful_pointer<PlannerState> self, std::uint32_t track) {
  const ActorInit init(self);
  return {
      [=](ask_atom, AskedPtr& asked, std::uint64_t flow) {
        Handling h(self, track, "ask", flow, 0, -1);
        try {
          asked->answer.set_value(plan::search_meshes(asked->question));
        } catch (...) {
          asked->answer.set_exception(std::current_exception());
        }
      },
  };
}

}  // namespace

struct Planner::Impl {
  std::shared_ptr<Engine::Impl> engine;  // keeps the actor system alive
  AddressOf<PlannerActor> actor;
  std::uint32_t caller = 0;
};

Planner::Planner(Engine& engine) : impl_(std::make_unique<Impl>()) {
  impl_->engine = engine.impl_;
  impl_->caller = Tracer::instance().register_actor("planner's caller");
  const std::uint32_t track = Tracer::instance().register_actor("planner");
  spawn_released();
  impl_->actor = {engine.impl_->system->spawn(planner_actor, track), track};
}

Planner::~Planner() {
  mailbox_release(impl_->actor.actor);
  caf::anon_send_exit(impl_->actor.actor, caf::exit_reason::user_shutdown);
}

std::future<std::vector<plan::MeshCandidate>> Planner::ask(plan::MeshSearch question) {
  auto asked = std::make_shared<Asked>();
  asked->question = std::move(question);
  std::future<std::vector<plan::MeshCandidate>> answer = asked->answer.get_future();
  tell_from_outside(impl_->caller, impl_->actor, SendTag{"ask", 0}, ask_atom::value, AskedPtr(std::move(asked)));
  return answer;
}

}  // namespace troupe::actors
