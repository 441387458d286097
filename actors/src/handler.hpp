#pragma once
// What every actor does around its handlers: the opening of a handler run (ordering for TSan, a
// span in the tracer) and the send that records itself in the tracer. One place, so a new actor
// kind cannot forget either.

#include <caf/all.hpp>

#include <cstdint>
#include <utility>

#include "trace_hooks.hpp"

namespace troupe::actors {

// ThreadSanitizer cannot see the synchronisation inside Debian's (uninstrumented) CAF library, so
// every hand-off through a mailbox would look like a race. Sends release and handlers acquire on
// the receiving actor, which is exactly the order a mailbox guarantees.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
template <class Handle>
void mailbox_release(const Handle& to) { __tsan_release(caf::actor_cast<caf::abstract_actor*>(to)); }
inline void mailbox_acquire(caf::abstract_actor* self) { __tsan_acquire(self); }
inline void handler_release(caf::abstract_actor* self) { __tsan_release(self); }
/// The arguments of a spawn are written by the spawning thread and read by the actor's init on a
/// worker: spawn_released() before spawning, spawn_acquired() first thing in the init.
inline int spawn_sync_token = 0;
inline void spawn_released() { __tsan_release(&spawn_sync_token); }
inline void spawn_acquired() { __tsan_acquire(&spawn_sync_token); }
/// A state is destroyed on whichever thread handles the actor's exit, which may never have run one
/// of its handlers: every init publishes its state (init_published, after setting the state's self
/// pointer) and every state destructor acquires that before reading the pointer (state_closing).
inline int state_sync_token = 0;
inline void init_published() { __tsan_release(&state_sync_token); }
inline void state_closing(caf::abstract_actor* const* self) {
  __tsan_acquire(&state_sync_token);
  if (*self) __tsan_acquire(*self);
}
#else
template <class Handle>
void mailbox_release(const Handle&) {}
inline void mailbox_acquire(caf::abstract_actor*) {}
inline void handler_release(caf::abstract_actor*) {}
inline void spawn_released() {}
inline void spawn_acquired() {}
inline void init_published() {}
inline void state_closing(caf::abstract_actor* const*) {}
#endif

/// Orders the handler runs of one actor, which CAF may move between threads: acquire at the start,
/// release at the end. State destructors acquire once more (state_closing).
class HandlerSync {
 public:
  explicit HandlerSync(caf::abstract_actor* self) : self_(self) { mailbox_acquire(self_); }
  ~HandlerSync() { handler_release(self_); }
  HandlerSync(const HandlerSync&) = delete;
  HandlerSync& operator=(const HandlerSync&) = delete;

 private:
  caf::abstract_actor* self_;
};

/// The opening of every actor's init: acquires what the spawner wrote, orders the init like a
/// handler run (its writes are published to the first handler) and publishes the state's self
/// pointer, which the state's destructor reads (state_closing).
class ActorInit {
 public:
  template <class Self>
  explicit ActorInit(Self self) : sync_(acquired(self)) {
    self->state.self = self;
    init_published();
  }

 private:
  template <class Self>
  static caf::abstract_actor* acquired(Self self) {
    spawn_acquired();
    return self;
  }
  HandlerSync sync_;
};

/// True when a message of step `step` belongs to the step in progress of a step-keyed state: a
/// message of an older step is late (that step failed) and is dropped; the first message of a
/// newer step starts it, clearing the old one's state (`State::start_step`).
template <class State>
bool current_step(State& s, std::uint64_t step) {
  if (step < s.step) return false;
  if (step > s.step) {
    s.step = step;
    s.start_step();
  }
  return true;
}

/// The opening of every handler: ordered after the actor's previous run, and traced as a span of
/// `kind` on track `track` answering the send `flow`.
class Handling {
 public:
  Handling(caf::abstract_actor* self, std::uint32_t track, const char* kind, std::uint64_t flow, std::uint64_t step,
           int mb)
      : sync_(self), trace_(track, kind, flow, step, mb) {}

 private:
  HandlerSync sync_;  // first in, last out: the span is recorded inside the ordered region
  HandlerTrace trace_;
};

/// Where a message goes: an actor's typed handle (so a wrong message does not compile) and its
/// track in traces.
template <class Handle>
struct AddressOf {
  Handle actor;
  std::uint32_t track = 0;
};

/// What a send records in the tracer besides its two ends.
struct SendTag {
  const char* kind;
  std::uint64_t step;
  int mb = -1;
  std::uint64_t bytes = 0;
};

/// Sends `xs..., flow` from the actor on track `from` to `to`, recording the send first; the
/// receiver's handler passes `flow` to its Handling, so traces draw the arrow.
template <class Self, class Handle, class... Ts>
void tell(Self* self, std::uint32_t from, const AddressOf<Handle>& to, const SendTag& tag, Ts&&... xs) {
  const std::uint64_t flow = trace_send(from, to.track, tag.kind, tag.step, tag.mb, tag.bytes);
  mailbox_release(to.actor);
  self->send(to.actor, std::forward<Ts>(xs)..., flow);
}

/// The same from a thread that is not an actor (a communicator's completion callback).
template <class Handle, class... Ts>
void tell_from_outside(std::uint32_t from, const AddressOf<Handle>& to, const SendTag& tag, Ts&&... xs) {
  const std::uint64_t flow = trace_send(from, to.track, tag.kind, tag.step, tag.mb, tag.bytes);
  mailbox_release(to.actor);
  caf::anon_send(to.actor, std::forward<Ts>(xs)..., flow);
}

}  // namespace troupe::actors
