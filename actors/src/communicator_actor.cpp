// The communicator actor: the one place that orders a step's collectives. Every rank must issue
// the same collectives in the same order, but buckets fill in whatever order backward finishes
// them, so full buckets wait here until every earlier bucket went out (all of them wait for the
// last on the naive path); the ranks' mean of the loss goes last. The collectives run on the
// transport's communicator thread, whose completions come back as messages.
#include <chrono>

#include "actor_kinds.hpp"
#include "grad_compression.hpp"
#include "handler.hpp"
#include "messages.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

namespace {

struct CommunicatorState {
  CommunicatorSetup setup;
  // How the buckets travel when compressed, with what that keeps between steps (used on the
  // communicator thread); null when they go whole.
  std::shared_ptr<BucketCompressors> compressors;
  // The step in progress: buffers of full buckets not yet issued, the next bucket to issue, and
  // the packed 0-d outputs once the program sent them.
  std::uint64_t step = 0;
  std::vector<Tensor> waiting;
  std::vector<std::chrono::steady_clock::time_point> full_at;  // when each bucket's last gradient came
  std::size_t full = 0, next = 0;
  Tensor outputs;
  caf::abstract_actor* self = nullptr;
  /// Clears the buckets' queue for a new step (current_step).
  void start_step() {
    waiting.assign(setup.peers->gradients.bucket_actors.size(), Tensor());
    full_at.assign(waiting.size(), {});
    full = next = 0;
    outputs = Tensor();
  }
  ~CommunicatorState() { state_closing(&self); }
  static inline const char* name = "troupe.communicator";
};
using Self = CommunicatorActor::stateful_pointer<CommunicatorState>;


// A collective failed on the communicator thread: the step fails with what was being reduced and
// why (any exception, so none escapes into the communicator's loop).
void tell_failure(std::uint32_t comm_track, const AddressOf<ProgramActor>& program, std::uint64_t step,
                  const std::string& what, std::exception_ptr e) {
  const auto fail = [&](ErrorKind kind, const std::string& why) {
    tell_from_outside(comm_track, program, SendTag{"fail", step}, fail_atom::value, step, static_cast<int>(kind),
                      what + ": " + why);
  };
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    fail(err.kind(), err.message());
  } catch (const std::exception& err) {
    fail(ErrorKind::runtime, err.what());
  }
}

// Queues `tensor`'s all-reduce on the communicator thread (with `scatter`, ZeRO-1's reduce-scatter:
// only this rank's equal slice of it is reduced, in place), traced as `kind` from this actor to the
// thread's track; `reply(tensor)` runs there once it is reduced and counted in the communicator's
// busy time; `what` names the collective in a failure. A compressed bucket (`bucket` >= 0 with
// compressors) goes through its compressor.
template <class Reply>
void issue(const CommunicatorState& s, const char* kind, const Tensor& tensor, transport::ReduceOp op,
           const std::string& what, Reply reply, bool scatter = false, int bucket = -1) {
  const std::uint32_t comm_track = s.setup.comm_track;
  const std::uint64_t step = s.step;
  const std::uint64_t flow = trace_send(s.setup.track, comm_track, kind, step, -1, tensor.nbytes());
  const AddressOf<ProgramActor> program = s.setup.peers->program;
  const std::shared_ptr<BucketCompressors> compressors = bucket >= 0 ? s.compressors : nullptr;
  const auto full_at = bucket >= 0 ? s.full_at[static_cast<std::size_t>(bucket)] : std::chrono::steady_clock::time_point{};
  s.setup.comm->submit(
      [=](transport::ProcessGroup& g) {
        HandlerTrace span(comm_track, kind, flow, step, -1);  // the collective shows on the communicator's track
        if (compressors) return compressors->all_reduce(g, static_cast<std::size_t>(bucket), tensor, full_at);
        if (!scatter) return g.all_reduce(tensor, op);
        const std::int64_t k = tensor.numel() / g.size();
        tensor.slice(0, g.rank() * k, (g.rank() + 1) * k).copy_from(g.reduce_scatter(tensor, op));
      },
      [=](std::exception_ptr e) {
        if (e) return tell_failure(comm_track, program, step, what, e);
        reply(tensor);
      });
}

// Issues what may go out now, in the order every rank uses: buckets in plan order, then the mean.
void issue_ready(CommunicatorState& s) {
  const std::size_t buckets = s.waiting.size();
  if (!s.setup.overlap && s.full < buckets) return;  // the textbook order: every AllReduce after backward
  const auto op = s.setup.gradients_mean ? transport::ReduceOp::mean : transport::ReduceOp::sum;
  const std::uint32_t comm_track = s.setup.comm_track;
  const std::uint64_t step = s.step;
  for (; s.next < buckets && s.waiting[s.next].defined(); ++s.next) {
    const AddressOf<BucketActor> bucket = s.setup.peers->gradients.bucket_actors[s.next];
    issue(s, s.setup.zero ? "reducescatter" : "allreduce", std::exchange(s.waiting[s.next], Tensor()), op,
          "gradient bucket " + std::to_string(s.next) + " of step " + std::to_string(step), [=](const Tensor& flat) {
            tell_from_outside(comm_track, bucket, SendTag{"reduced", step, -1, flat.nbytes()}, reduced_atom::value, step, flat);
          }, s.setup.zero, static_cast<int>(s.next));
  }
  if (s.next < buckets || !s.outputs.defined()) return;
  const AddressOf<ProgramActor> program = s.setup.peers->program;
  issue(s, "mean", std::exchange(s.outputs, Tensor()), transport::ReduceOp::mean,
        "averaging the outputs of step " + std::to_string(step), [=](const Tensor& mean) {
          tell_from_outside(comm_track, program, SendTag{"reduced", step, -1, mean.nbytes()}, reduced_atom::value, step, mean);
        });
}

CommunicatorActor::behavior_type communicator_actor(Self self, CommunicatorSetup setup) {
  const ActorInit init(self);
  self->state.setup = std::move(setup);
  self->state.compressors = self->state.setup.peers->gradients.compression;
  const std::uint32_t track = self->state.setup.track;
  return {
      [=](reduce_atom, std::uint64_t step, int bucket, const Tensor& flat, std::uint64_t flow) {
        Handling h(self, track, "reduce", flow, step, -1);
        CommunicatorState& s = self->state;
        if (!current_step(s, step)) return;
        s.waiting.at(static_cast<std::size_t>(bucket)) = flat;
        s.full_at[static_cast<std::size_t>(bucket)] = std::chrono::steady_clock::now();
        ++s.full;
        issue_ready(s);
      },
      [=](mean_atom, std::uint64_t step, const Tensor& outputs, std::uint64_t flow) {
        Handling h(self, track, "mean", flow, step, -1);
        if (!current_step(self->state, step)) return;
        self->state.outputs = outputs;
        issue_ready(self->state);
      },
  };
}

}  // namespace

CommunicatorActor spawn_communicator_actor(caf::actor_system& sys, CommunicatorSetup setup) {
  spawn_released();
  return sys.spawn(communicator_actor, std::move(setup));
}

}  // namespace troupe::actors
