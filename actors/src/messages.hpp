#pragma once
// The messages actors exchange. Payloads are handles (shared_ptr, Tensor) and small ids (step,
// micro-batch, register); tensor bytes are never copied into a message.

#include <caf/all.hpp>

#include <memory>
#include <string>
#include <vector>

#include "troupe/actors/program.hpp"
#include "troupe/graph/sym_shape.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::actors {

/// Everything a step shares between its actors, created once per step by the program actor.
struct StepContext {
  std::uint64_t step = 0;
  int micro_batches = 1;                     // this step's count: fewer than asked when the batch has fewer rows
  std::vector<std::vector<Tensor>> inputs;   // [micro-batch][graph input]
  std::vector<Tensor> parameters;            // in the order of the graph's parameters
  std::vector<graph::SymBindings> bindings;  // [micro-batch]: symbol sizes (micro-batches may differ in rows)
  std::vector<double> weights;               // [micro-batch]: its share of the batch's rows (they sum to 1)
  bool gradient_norms = false;               // gradient stages report their squared norms (parallel clip)
};
using StepContextPtr = std::shared_ptr<const StepContext>;

/// A register of a producer became readable: it holds `values` (the producer's outputs) for `mb`.
struct Ready {
  StepContextPtr ctx;
  int producer = 0;  // actor index of the sender
  int mb = 0;
  int reg = 0;
  std::shared_ptr<const std::vector<Tensor>> values;
  std::uint64_t flow = 0;  // tracer flow id
};
using ReadyPtr = std::shared_ptr<const Ready>;

/// What run_async hands the program actor.
struct RunRequest {
  std::vector<Tensor> inputs;
  StepCallback done;
  std::uint64_t flow = 0;  // tracer flow id of the caller's send
};
using RunRequestPtr = std::shared_ptr<RunRequest>;

/// The handles of all actors of a program, filled before the first message flows.
struct Peers {
  std::vector<caf::actor> actors;  // by actor index
  caf::actor program;
  std::vector<std::uint32_t> trace_ids;  // by actor index; the program actor's is last
};
using PeersPtr = std::shared_ptr<Peers>;

/// Gradients handed to one optimizer actor at the end of a step, by parameter name.
using GradientMapPtr = std::shared_ptr<const std::map<std::string, Tensor>>;

// ThreadSanitizer cannot see the synchronisation inside Debian's (uninstrumented) CAF library, so
// every hand-off through a mailbox would look like a race. Sends release and handlers acquire on
// the receiving actor, which is exactly the order a mailbox guarantees.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline void mailbox_release(const caf::actor& to) { __tsan_release(caf::actor_cast<caf::abstract_actor*>(to)); }
inline void mailbox_acquire(caf::abstract_actor* self) { __tsan_acquire(self); }
inline void handler_release(caf::abstract_actor* self) { __tsan_release(self); }
/// The arguments of a spawn are written by the spawning thread and read by the actor's init on a
/// worker: spawn_released() before spawning, spawn_acquired() first thing in the init.
inline int spawn_sync_token = 0;
inline void spawn_released() { __tsan_release(&spawn_sync_token); }
inline void spawn_acquired() { __tsan_acquire(&spawn_sync_token); }
#else
inline void mailbox_release(const caf::actor&) {}
inline void mailbox_acquire(caf::abstract_actor*) {}
inline void handler_release(caf::abstract_actor*) {}
inline void spawn_released() {}
inline void spawn_acquired() {}
#endif

/// Orders the handler runs of one actor, which CAF may move between threads: acquire at the start,
/// release at the end. States acquire once more in their destructors (run after the last handler).
class HandlerSync {
 public:
  explicit HandlerSync(caf::abstract_actor* self) : self_(self) { mailbox_acquire(self_); }
  ~HandlerSync() { handler_release(self_); }
  HandlerSync(const HandlerSync&) = delete;
  HandlerSync& operator=(const HandlerSync&) = delete;

 private:
  caf::abstract_actor* self_;
};

/// self->send with the ordering annotation above.
template <class Self, class... Ts>
void post(Self* self, const caf::actor& to, Ts&&... xs) {
  mailbox_release(to);
  self->send(to, std::forward<Ts>(xs)...);
}

/// A send from a thread that is not an actor (a communicator's completion callback).
template <class... Ts>
void post_from_outside(const caf::actor& to, Ts&&... xs) {
  mailbox_release(to);
  caf::anon_send(to, std::forward<Ts>(xs)...);
}

/// The gradients of one reduced bucket, in the bucket's entry order.
using TensorListPtr = std::shared_ptr<const std::vector<Tensor>>;

using ready_atom = caf::atom_constant<caf::atom("ready")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using result_atom = caf::atom_constant<caf::atom("result")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using apply_atom = caf::atom_constant<caf::atom("apply")>;
using applied_atom = caf::atom_constant<caf::atom("applied")>;
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;  // communicator -> bucket / program
using bucket_atom = caf::atom_constant<caf::atom("bucket")>;    // bucket -> program

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StepContextPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ReadyPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::RunRequestPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::GradientMapPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::TensorListPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::Tensor)
