// The program actor steers: its phases are behaviors. idle waits for a request; gathering (ZeRO-1
// with the step's casts) for the last step's all-gather of the parameters; running collects
// the nodes' `done` and the outputs (and, stream-ordered, the end of the streams' work); reducing (data parallel) waits for the ranks' mean of the
// loss; updating lets the optimizers update and collects what they applied. Failures of the step
// in progress answer the caller from any phase.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <utility>

#include "program_actor.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

namespace {

using Clock = std::chrono::steady_clock;

// Calls the caller back. A throwing callback is the caller's bug; the program keeps serving.
void answer(const RunRequestPtr& req, StepResult* result, std::exception_ptr error) {
  try {
    req->done(result, error);
  } catch (...) {
  }
}

struct ProgramState {
  std::shared_ptr<const ProgramSetup> setup;
  std::deque<RunRequestPtr> queue;
  RunRequestPtr current;  // the request of the step in progress
  std::shared_ptr<StepArena> memory;  // the step's planned memory, ended with the step
  // Data parallel: the gradient buckets' buffers, kept from step to step (steps run one at a time),
  // unless a step handed views of them to its caller (returned gradients) or failed with acts of
  // it possibly still writing: then the next step makes new ones.
  std::vector<Tensor> bucket_buffers;
  Tensor output_means[2];  // data parallel: the 0-d outputs packed for their mean over the ranks, reused
  std::vector<Tensor> step_values;  // the step nodes' outputs (bf16 weights), written over each step
  std::uint64_t step = 0;
  // What the step in progress has collected so far.
  int done = 0, outputs_in = 0, applied = 0, buckets_in = 0, norms_in = 0;
  enum class Drain { not_asked, asked, over } drain = Drain::not_asked;  // the streams' work of the step
  std::vector<Tensor> outputs;  // by sink index; gradient sinks stay empty
  double grad_norm = 0;
  std::vector<double> bucket_norms;
  std::map<std::string, Tensor> gradients;
  double comm_busy_at_start = 0;            // communicator busy seconds when the step started
  std::uint64_t comm_bytes_at_start = 0;    // and the bytes it had sent
  Clock::time_point compute_done, buckets_done;  // every node finished; the last bucket came back reduced
  caf::abstract_actor* self = nullptr;
  static inline const char* name = "troupe.program";
  // Requests still open when the program shuts down fail instead of leaving their caller waiting.
  ~ProgramState() {
    state_closing(&self);
    auto error = std::make_exception_ptr(Error(ErrorKind::runtime, "the program was shut down before the step ran"));
    if (current) answer(current, nullptr, error);
    for (auto& r : queue) answer(r, nullptr, error);
  }
};
using Self = caf::stateful_actor<ProgramState>;

std::uint32_t me(const ProgramState& s) { return s.setup->peers->program.track; }
const GradientPath& path(const ProgramState& s) { return s.setup->peers->gradients; }
int output_count(const ActorGraph& plan) {
  int n = 0;
  for (int param : plan.sink_param) n += param < 0;
  return n;
}

caf::behavior idle(Self* self);
caf::behavior gathering(Self* self);
caf::behavior running(Self* self);
caf::behavior reducing(Self* self);
caf::behavior updating(Self* self);

// Makes the 0-d output `t` hold `value`: in place where the program holds the only handle on a host
// tensor (the step's own output, kept in the step's arena), else as a new tensor.
void set_scalar(Tensor& t, double value) {
  if (!t.device().is_cpu() || t.storage().use_count() > 1) {
    t = Tensor::scalar(value, t.dtype());
    return;
  }
  switch (t.dtype()) {
    case DType::f32: *t.data<float>() = static_cast<float>(value); return;
    case DType::f64: *t.data<double>() = value; return;
    default: t = Tensor::scalar(value, t.dtype());
  }
}

// ZeRO-1: whether the step's casts (step nodes), which read every parameter, may run: the last
// step's all-gather has written them all. Otherwise the program is told by a message when it has
// (gathering). Throws the all-gather's failure.
bool parameters_written(Self* self) {
  const ProgramState& s = self->state;
  const std::shared_ptr<ZeroShard>& zero = path(s).zero;
  if (s.setup->plan->step_nodes.empty() || !zero) return true;
  const std::uint64_t next = s.step + 1;
  return zero->when_settled([program = s.setup->peers->program, next, track = zero->track()](std::exception_ptr e) {
    tell_from_outside(track, program, SendTag{"gathered", next}, gathered_atom::value, next, e);
  });
}

// Starts the next queued step, or goes idle.
void start_next(Self* self) {
  ProgramState& s = self->state;
  while (!s.queue.empty()) {
    std::exception_ptr unwritten;
    try {
      if (!parameters_written(self)) {
        self->become(gathering(self));
        return;
      }
    } catch (...) {
      unwritten = std::current_exception();
    }
    s.current = s.queue.front();
    s.queue.pop_front();
    ++s.step;
    s.done = s.outputs_in = s.applied = s.buckets_in = s.norms_in = 0;
    s.drain = ProgramState::Drain::not_asked;
    s.outputs.assign(s.setup->plan->sinks.size(), Tensor());
    s.grad_norm = std::numeric_limits<double>::quiet_NaN();
    s.bucket_norms.assign(path(s).bucket_actors.size(), 0.0);
    s.gradients.clear();
    if (s.setup->comm) {
      s.comm_busy_at_start = s.setup->comm->busy_seconds();
      s.comm_bytes_at_start = s.setup->comm->bytes_sent();
    }
    StepContextPtr ctx;
    try {
      if (unwritten) std::rethrow_exception(unwritten);
      ctx = make_step_context(*s.setup, s.step, s.current->inputs, s.current->random, s.bucket_buffers, s.step_values);
    } catch (...) {
      answer(std::exchange(s.current, nullptr), nullptr, std::current_exception());
      continue;
    }
    s.memory = ctx->memory;
    // A failed step's work still queued, or queued late, is skipped; this step's runs.
    for (const auto& stream : s.setup->peers->streams) stream->restart(s.step);
    tell(self, me(s), s.setup->peers->at(0), SendTag{"start", s.step}, start_atom::value, ctx);
    self->become(running(self));
    return;
  }
  self->become(idle(self));
}

std::unique_ptr<StepResult> collect(ProgramState& s) {
  auto r = std::make_unique<StepResult>();
  r->step = s.step;
  r->grad_norm = s.grad_norm;
  if (const auto& scaler = s.setup->loss_scaler) {
    // The next step's backward reads the updated scale: steps run one after another.
    r->loss_scale = scaler->scale();
    r->skipped = !std::isfinite(s.grad_norm);
    scaler->update(r->skipped);
  }
  r->bucket_squared_norms = s.bucket_norms;
  if (s.setup->comm) {
    r->comm_ms = (s.setup->comm->busy_seconds() - s.comm_busy_at_start) * 1e3;
    r->comm_bytes = s.setup->comm->bytes_sent() - s.comm_bytes_at_start;
    r->exposed_comm_ms = std::max(0.0, std::chrono::duration<double, std::milli>(s.buckets_done - s.compute_done).count());
  }
  for (std::size_t k = 0; k < s.outputs.size(); ++k)
    if (s.setup->plan->sink_param[k] < 0) r->outputs.push_back(s.outputs[k]);
  r->gradients = std::move(s.gradients);
  if (!r->gradients.empty()) s.bucket_buffers.clear();
  return r;
}

// Answers the caller and moves on to the next step. A recorded step's memory plan is made first,
// so the caller can read its report.
void finish(Self* self, std::unique_ptr<StepResult> result, std::exception_ptr error) {
  if (error) {  // acts of the failed step may still run: the next step writes into new buffers
    self->state.bucket_buffers.clear();
    self->state.step_values.clear();
  }
  if (auto memory = std::exchange(self->state.memory, nullptr)) self->state.setup->memory->end(*memory, error != nullptr);
  answer(std::exchange(self->state.current, nullptr), result.get(), error);
  start_next(self);
}

// The step is over once every optimizer applied and every report the result carries is in.
void finish_if_complete(Self* self) {
  ProgramState& s = self->state;
  const int norms = s.setup->clip_grad_norm > 0 || s.setup->loss_scaler ? 1 : 0;
  if (s.applied == static_cast<int>(path(s).optimizers.size()) && s.norms_in == norms &&
      s.buckets_in == static_cast<int>(s.bucket_norms.size()))
    finish(self, collect(s), nullptr);
}

// The step's compute is over and its outputs final: the optimizers may update the parameters
// (no node reads them any more).
void start_update(Self* self) {
  ProgramState& s = self->state;
  self->become(updating(self));
  for (const auto& o : path(s).optimizers) tell(self, me(s), o, SendTag{"update", s.step}, update_atom::value, s.step);
  finish_if_complete(self);
}

// Stream order: whether the work the step queued on the streams is over (ops whose values nobody
// reads on the host included). Else asks to be told by a message (draining).
bool streams_drained(Self* self) {
  ProgramState& s = self->state;
  const auto& streams = s.setup->peers->streams;
  if (streams.empty() || s.drain == ProgramState::Drain::over) return true;
  if (s.drain == ProgramState::Drain::asked) return false;
  s.drain = ProgramState::Drain::asked;
  std::vector<Event> ends;
  for (const auto& stream : streams) ends.push_back(stream->record());
  Event::all(ends).then([program = s.setup->peers->program, step = s.step](std::exception_ptr e) {
    tell_from_outside(program.track, program, SendTag{"drained", step}, drained_atom::value, step, e);
  });
  return false;
}

// Every node has finished, every output is in and the streams' work is over: on to the loss' mean
// over the ranks, or the update.
void compute_finished(Self* self) {
  ProgramState& s = self->state;
  if (s.done < s.setup->plan->op_count + 1 || s.outputs_in < output_count(*s.setup->plan)) return;
  if (!streams_drained(self)) return;
  s.compute_done = Clock::now();
  if (!s.setup->comm) return start_update(self);
  // The ranks' mean of the 0-d outputs (the loss), so every rank reports the same value.
  std::vector<float> values;
  for (std::size_t k = 0; k < s.outputs.size(); ++k)
    if (s.setup->plan->sink_param[k] < 0 && s.outputs[k].dim() == 0) values.push_back(static_cast<float>(s.outputs[k].item()));
  // One of the program's two buffers, both made by the first step, that the collective has let go
  // of (the last step's message to the communicator may still hold one for a while); a new one only
  // when both are held.
  const auto n = static_cast<std::int64_t>(values.size());
  for (Tensor& t : s.output_means)
    if (!t.defined() || t.numel() != n) t = Tensor::empty({n});
  const auto free = [](const Tensor& t) { return t.storage().use_count() == 1; };
  Tensor& packed = free(s.output_means[0]) ? s.output_means[0] : s.output_means[1];
  if (!free(packed)) packed = Tensor::empty({n});
  std::copy(values.begin(), values.end(), packed.data<float>());
  self->become(reducing(self));
  tell(self, me(s), path(s).communicator, SendTag{"mean", s.step, -1, packed.nbytes()}, mean_atom::value, s.step, packed);
}

// What every phase of a step in progress handles: more requests, failures, and the reports of
// the gradient path (reduced buckets' norms, the clipping norm), which arrive whenever the path
// gets there; `then` runs after such a report (updating checks whether the step is complete).
caf::message_handler common(Self* self, void (*then)(Self*)) {
  return {
      [=](run_atom, const RunRequestPtr& req, std::uint64_t flow) {
        Handling h(self, me(self->state), "run", flow, self->state.step + 1, -1);
        self->state.queue.push_back(req);
      },
      [=](fail_atom, std::uint64_t step, int kind, const std::string& what, std::uint64_t flow) {
        Handling h(self, me(self->state), "fail", flow, step, -1);
        // Later messages of this step are dropped everywhere: actors drop a step's state when the
        // next one reaches them, so nothing waits on the failed step.
        if (step == self->state.step) finish(self, nullptr, std::make_exception_ptr(Error(static_cast<ErrorKind>(kind), what)));
      },
      [=](bucket_atom, std::uint64_t step, int bucket, double squared_norm, std::uint64_t flow) {
        Handling h(self, me(self->state), "bucket", flow, step, -1);
        ProgramState& s = self->state;
        if (step != s.step) return;
        s.bucket_norms.at(static_cast<std::size_t>(bucket)) = squared_norm;
        if (++s.buckets_in == static_cast<int>(s.bucket_norms.size())) s.buckets_done = Clock::now();
        then(self);
      },
      [=](clipped_atom, std::uint64_t step, double norm, std::uint64_t flow) {
        Handling h(self, me(self->state), "clipped", flow, step, -1);
        if (step != self->state.step) return;
        self->state.grad_norm = norm;
        ++self->state.norms_in;
        then(self);
      },
  };
}

void nothing(Self*) {}

caf::behavior idle(Self* self) {
  return {
      [=](run_atom, const RunRequestPtr& req, std::uint64_t flow) {
        Handling h(self, me(self->state), "run", flow, self->state.step + 1, -1);
        self->state.queue.push_back(req);
        start_next(self);
      },
  };
}

// ZeRO-1: a step waits for the last all-gather before its casts read the parameters.
caf::behavior gathering(Self* self) {
  return {
      [=](run_atom, const RunRequestPtr& req, std::uint64_t flow) {
        Handling h(self, me(self->state), "run", flow, self->state.step + 1, -1);
        self->state.queue.push_back(req);
      },
      // (a failure is the next when_settled's to throw)
      [=](gathered_atom, std::uint64_t step, const std::exception_ptr&, std::uint64_t flow) {
        Handling h(self, me(self->state), "gathered", flow, step, -1);
        start_next(self);
      },
  };
}

caf::behavior running(Self* self) {
  return caf::message_handler{
      [=](done_atom, std::uint64_t step, int, std::uint64_t flow) {
        Handling h(self, me(self->state), "done", flow, step, -1);
        if (step != self->state.step) return;
        ++self->state.done;
        compute_finished(self);
      },
      [=](output_atom, std::uint64_t step, int sink, const Tensor& value, std::uint64_t flow) {
        Handling h(self, me(self->state), "output", flow, step, -1);
        if (step != self->state.step) return;
        self->state.outputs.at(static_cast<std::size_t>(sink)) = value;
        ++self->state.outputs_in;
        compute_finished(self);
      },
      // A kernel whose value nobody read on the host may have failed: its error names it.
      [=](drained_atom, std::uint64_t step, const std::exception_ptr& error, std::uint64_t flow) {
        Handling h(self, me(self->state), "drained", flow, step, -1);
        if (step != self->state.step) return;
        if (error) return finish(self, nullptr, error);
        self->state.drain = ProgramState::Drain::over;
        compute_finished(self);
      },
  }.or_else(common(self, nothing));
}

caf::behavior reducing(Self* self) {
  return caf::message_handler{
      [=](reduced_atom, std::uint64_t step, const Tensor& mean, std::uint64_t flow) {
        Handling h(self, me(self->state), "reduced", flow, step, -1);
        ProgramState& s = self->state;
        if (step != s.step) return;
        const auto values = mean.to_vector<float>();
        std::size_t i = 0;
        for (std::size_t k = 0; k < s.outputs.size(); ++k)
          if (s.setup->plan->sink_param[k] < 0 && s.outputs[k].dim() == 0)
            set_scalar(s.outputs[k], values[i++]);
        start_update(self);
      },
  }.or_else(common(self, nothing));
}

caf::behavior updating(Self* self) {
  return caf::message_handler{
      [=](applied_atom, std::uint64_t step, int, const GradientMapPtr& grads, std::uint64_t flow) {
        Handling h(self, me(self->state), "applied", flow, step, -1);
        if (step != self->state.step) return;
        self->state.gradients.insert(grads->begin(), grads->end());
        ++self->state.applied;
        finish_if_complete(self);
      },
  }.or_else(common(self, finish_if_complete));
}

caf::behavior program_actor(Self* self, std::shared_ptr<const ProgramSetup> setup) {
  const ActorInit init(self);
  self->state.setup = std::move(setup);
  // A message the current phase does not handle waits for the phase that does (a late one of a
  // failed step is then dropped by the step check). CAF's drop would answer its sender with an
  // error, which kills a sender that does not expect answers.
  self->set_default_handler(caf::skip);
  return idle(self);
}

}  // namespace

ProgramActor spawn_program_actor(caf::actor_system& sys, std::shared_ptr<const ProgramSetup> setup) {
  spawn_released();
  return caf::actor_cast<ProgramActor>(sys.spawn(program_actor, std::move(setup)));
}

}  // namespace troupe::actors
