#include "program_actor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>

#include "troupe/transport/process_group.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::actors {

namespace {

struct ProgramState {
  std::shared_ptr<const ProgramSetup> setup;
  std::deque<RunRequestPtr> queue;
  RunRequestPtr current;  // null when idle
  std::uint64_t step = 0;
  int done = 0, results = 0, applied = 0;
  bool updating = false;
  bool clipped = false;  // the step's gradients went through clipping (once per step)
  double grad_norm = 0;
  std::vector<Tensor> sink_values;
  std::vector<double> sink_norms;  // squared gradient norms reported by the gradient stages
  // Data parallel, per step: gradients arrived per bucket, the next bucket to submit (buckets go
  // out in plan order on every rank), reduced buckets, their squared norms, the reduced loss.
  std::vector<std::size_t> bucket_fill;
  std::size_t next_submit = 0, buckets_done = 0;
  std::vector<double> bucket_norms;
  bool outputs_submitted = false, outputs_reduced = false;
  double comm_busy_at_start = 0;  // communicator busy seconds when the step started
  std::chrono::steady_clock::time_point compute_done{};  // every op actor finished (backward done)
  bool compute_finished = false;
  double comm_ms = 0, exposed_ms = 0;
  caf::abstract_actor* self = nullptr;
  static inline const char* name = "troupe.program";
  // Requests still open when the program shuts down fail instead of leaving their caller waiting.
  ~ProgramState() {
    mailbox_acquire(self);
    auto error = std::make_exception_ptr(Error(ErrorKind::runtime, "the program was shut down before the step ran"));
    if (current) current->done(nullptr, error);
    for (auto& r : queue) r->done(nullptr, error);
  }
};
using Self = caf::stateful_actor<ProgramState>;

std::uint32_t my_trace_id(const ProgramState& s) { return s.setup->peers->program.track; }

// The rows of each micro-batch when `rows` are split into `wanted` parts: sizes differ by at most
// one, larger first (torch.tensor_split's sizes), and no part is empty, so a batch of fewer rows
// than `wanted` gets one row per micro-batch (as torch.chunk gives fewer chunks).
std::vector<std::int64_t> micro_batch_rows(std::int64_t rows, int wanted) {
  const std::int64_t count = std::max<std::int64_t>(1, std::min<std::int64_t>(wanted, rows));
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(count), rows / count);
  for (std::int64_t k = 0; k < rows % count; ++k) ++sizes[static_cast<std::size_t>(k)];
  return sizes;
}

// The batch's rows: dim 0 of every input, which must agree, and be dynamic in the signature, when
// the batch is split.
std::int64_t batch_rows(const graph::Graph& g, const std::vector<Tensor>& inputs, int wanted) {
  if (wanted == 1 || inputs.empty()) return 0;  // nothing to split
  auto name = [&](std::size_t k) { return "input '" + g.value(g.inputs()[k]).name + "'"; };
  for (std::size_t k = 0; k < inputs.size(); ++k)
    TROUPE_CHECK(inputs[k].dim() > 0, shape_mismatch, name(k), " is 0-d, so it has no dim 0 to split into ", wanted,
                 " micro-batches; give every input a batch dim or use 1 micro-batch");
  const std::int64_t rows = inputs[0].shape()[0];
  for (std::size_t k = 1; k < inputs.size(); ++k)
    TROUPE_CHECK(inputs[k].shape()[0] == rows, shape_mismatch, name(k), " of shape ", shape_str(inputs[k].shape()), " has ",
                 inputs[k].shape()[0], " rows but ", name(0), " has ", rows,
                 "; micro-batches split every input along dim 0, so all inputs need the same batch size (or use 1 micro-batch)");
  if (rows > 1)
    for (std::size_t k = 0; k < inputs.size(); ++k)
      TROUPE_CHECK(!g.value(g.inputs()[k]).info.shape[0].is_static(), shape_mismatch, name(k),
                   " has a fixed dim 0 in the signature, so it cannot be split into ", wanted,
                   " micro-batches; declare dim 0 dynamic (-1 or a named symbol) or use 1 micro-batch");
  return rows;
}

// Splits the step's inputs into micro-batches along dim 0 (unevenly when the count does not divide
// the batch), weights each by its share of the rows, and snapshots the parameters.
StepContextPtr make_context(const ProgramState& s, const std::vector<Tensor>& inputs) {
  const graph::Graph& g = s.setup->fn->graph();
  const graph::SymBindings whole = graph::bind_inputs(g, inputs);  // whole-batch check first: its errors name the user's shapes
  auto ctx = std::make_shared<StepContext>();
  ctx->step = s.step;
  const std::int64_t rows = batch_rows(g, inputs, s.setup->micro_batches);
  const std::vector<std::int64_t> sizes = micro_batch_rows(rows, s.setup->micro_batches);
  ctx->micro_batches = static_cast<int>(sizes.size());
  if (sizes.size() == 1) {
    ctx->inputs = {inputs};
    ctx->bindings = {whole};
    ctx->weights = {1.0};
  } else {
    std::int64_t begin = 0;
    for (std::int64_t size : sizes) {
      std::vector<Tensor> part;
      for (const Tensor& t : inputs) part.push_back(t.slice(0, begin, begin + size).contiguous());
      ctx->bindings.push_back(graph::bind_inputs(g, part));
      ctx->inputs.push_back(std::move(part));
      ctx->weights.push_back(static_cast<double>(size) / static_cast<double>(rows));
      begin += size;
    }
  }
  ctx->gradient_norms = s.setup->clip_grad_norm > 0 && s.setup->clip_mode == ClipMode::parallel && !s.setup->comm;
  for (const graph::Var& p : s.setup->fn->parameters()) ctx->parameters.push_back(p.tensor());
  return ctx;
}

void finish(Self* self, std::unique_ptr<StepResult> result, std::exception_ptr error);

void start_next(Self* self) {
  ProgramState& s = self->state;
  while (!s.current && !s.queue.empty()) {
    s.current = s.queue.front();
    s.queue.pop_front();
    ++s.step;
    s.done = s.results = s.applied = 0;
    s.updating = false;
    s.clipped = false;
    s.grad_norm = std::numeric_limits<double>::quiet_NaN();
    s.sink_values.assign(s.setup->plan->sinks.size(), Tensor());
    s.sink_norms.assign(s.setup->plan->sinks.size(), 0.0);
    if (s.setup->comm) {
      s.bucket_fill.assign(s.setup->buckets->buckets.size(), 0);
      s.bucket_norms.assign(s.setup->buckets->buckets.size(), 0.0);
      s.next_submit = s.buckets_done = 0;
      s.outputs_submitted = s.outputs_reduced = false;
      s.comm_busy_at_start = s.setup->comm->busy_seconds();
      s.compute_finished = false;
    }
    StepContextPtr ctx;
    try {
      ctx = make_context(s, s.current->inputs);
    } catch (...) {
      finish(self, nullptr, std::current_exception());
      continue;
    }
    tell(self, my_trace_id(s), s.setup->peers->at(0), SendTag{"start", s.step}, start_atom::value, ctx);
  }
}

void finish(Self* self, std::unique_ptr<StepResult> result, std::exception_ptr error) {
  ProgramState& s = self->state;
  RunRequestPtr req = std::move(s.current);
  s.current = nullptr;
  s.sink_values.clear();
  try {
    req->done(result.get(), error);
  } catch (...) {
    // A throwing callback is the caller's bug; the program keeps serving other steps.
  }
  start_next(self);
}

// A collective failed on the communicator thread: the step fails with what was being reduced and
// why (any exception, so none escapes into the communicator's loop).
void tell_comm_failure(std::uint32_t comm, const Address& program, std::uint64_t step, const std::string& what,
                       std::exception_ptr e) {
  const auto fail = [&](ErrorKind kind, const std::string& why) {
    tell_from_outside(comm, program, SendTag{"fail", step}, fail_atom::value, step, static_cast<int>(kind), what + ": " + why);
  };
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    fail(err.kind(), err.message());
  } catch (const std::exception& err) {
    fail(ErrorKind::runtime, err.what());
  }
}

// Submits the buckets whose gradients are all in, in plan order (so every rank issues the same
// collectives in the same order); on the naive path only once the whole step has finished.
void submit_buckets(Self* self, bool step_finished) {
  ProgramState& s = self->state;
  const BucketPlan& bp = *s.setup->buckets;
  while (s.next_submit < bp.buckets.size() && s.bucket_fill[s.next_submit] == bp.buckets[s.next_submit].size() &&
         (s.setup->overlap || step_finished)) {
    const std::size_t b = s.next_submit++;
    Tensor flat = Tensor::empty({bp.numel[b]});
    for (const BucketEntry& e : bp.buckets[b]) {
      const Tensor g = s.sink_values[static_cast<std::size_t>(e.sink)].contiguous();
      std::memcpy(flat.data<float>() + e.offset, g.raw_data(), g.nbytes());
    }
    const Address bucket{s.setup->bucket_actors[b], s.setup->bucket_trace_ids[b]};
    const Address program = s.setup->peers->program;
    const std::uint64_t step = s.step;
    const std::uint32_t comm = s.setup->comm_trace_id;
    const std::uint64_t flow = trace_send(my_trace_id(s), comm, "allreduce", step, -1, flat.nbytes());
    const auto op = s.setup->gradients_mean ? transport::ReduceOp::mean : transport::ReduceOp::sum;
    s.setup->comm->submit(
        [=](transport::ProcessGroup& g) {
          HandlerTrace span(comm, "allreduce", flow, step, -1);  // the collective shows on the communicator's track
          g.all_reduce(flat, op);
        },
        [=](std::exception_ptr e) {
          if (e)
            return tell_comm_failure(comm, program, step, "gradient bucket " + std::to_string(b) + " of step " + std::to_string(step), e);
          tell_from_outside(comm, bucket, SendTag{"reduced", step, -1, flat.nbytes()}, reduced_atom::value, step,
                            static_cast<int>(b), flat);
        });
  }
}

// The ranks' mean of the step's 0-d outputs (the loss), so every rank reports the same value.
void submit_outputs(Self* self) {
  ProgramState& s = self->state;
  s.outputs_submitted = true;
  std::vector<float> values;
  for (std::size_t k = 0; k < s.sink_values.size(); ++k)
    if (s.setup->plan->sink_param[k] < 0 && s.sink_values[k].dim() == 0) values.push_back(static_cast<float>(s.sink_values[k].item()));
  Tensor packed = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  const Address program = s.setup->peers->program;
  const std::uint64_t step = s.step;
  const std::uint32_t comm = s.setup->comm_trace_id;
  s.setup->comm->all_reduce(packed, transport::ReduceOp::mean, [=](std::exception_ptr e) {
    if (e) return tell_comm_failure(comm, program, step, "averaging the outputs of step " + std::to_string(step), e);
    tell_from_outside(comm, program, SendTag{"reduced", step, -1, packed.nbytes()}, reduced_atom::value, step, -1, packed);
  });
}

// Global-norm clipping of the step's gradients (in sink_values). Summing the partial norms in sink
// order, not arrival order, keeps the norm identical from run to run.
double clip_gradients(ProgramState& s) {
  const ActorPlan& plan = *s.setup->plan;
  double total = 0;
  if (s.setup->comm && s.setup->clip_mode == ClipMode::parallel) {
    for (double b : s.bucket_norms) total += b;  // each reduced bucket's own norm: identical on every rank
  } else {
    for (std::size_t k = 0; k < s.sink_values.size(); ++k) {
      if (plan.sink_param[k] < 0) continue;
      total += s.setup->clip_mode == ClipMode::parallel ? s.sink_norms[k] : kernels::squared_norm(s.sink_values[k]);
    }
  }
  const double norm = std::sqrt(total);
  const double scale = kernels::clip_coefficient(norm, s.setup->clip_grad_norm);
  if (scale != 1.0)
    for (std::size_t k = 0; k < s.sink_values.size(); ++k)
      if (plan.sink_param[k] >= 0) s.sink_values[k] = kernels::mul(s.sink_values[k], scale);  // out of place: gradients may share storage
  return norm;
}

std::unique_ptr<StepResult> collect(ProgramState& s) {
  auto r = std::make_unique<StepResult>();
  r->step = s.step;
  r->grad_norm = s.grad_norm;
  r->bucket_squared_norms = s.bucket_norms;
  r->comm_ms = s.comm_ms;
  r->exposed_comm_ms = s.exposed_ms;
  const auto& fn = *s.setup->fn;
  for (std::size_t k = 0; k < s.sink_values.size(); ++k) {
    const int param = s.setup->plan->sink_param[k];
    if (param < 0) r->outputs.push_back(s.sink_values[k]);
    else r->gradients[fn.parameters()[static_cast<std::size_t>(param)].name()] = s.sink_values[k];
  }
  return r;
}

// Once every actor finished the step: run the optimizers (if any), then answer.
void check_complete(Self* self) {
  ProgramState& s = self->state;
  const ActorPlan& plan = *s.setup->plan;
  if (!s.current || s.done < plan.op_count + 1 || s.results < static_cast<int>(plan.sinks.size())) return;
  if (s.setup->comm) {
    if (!s.compute_finished) {
      s.compute_finished = true;
      s.compute_done = std::chrono::steady_clock::now();
    }
    submit_buckets(self, /*step_finished=*/true);
    if (s.buckets_done < s.setup->buckets->buckets.size()) return;
    if (!s.outputs_submitted) {
      // Gradient communication of this step is over: how much of it ran after compute.
      s.comm_ms = (s.setup->comm->busy_seconds() - s.comm_busy_at_start) * 1e3;
      s.exposed_ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.compute_done).count() * 1e3;
      submit_outputs(self);
    }
    if (!s.outputs_reduced) return;
  }
  if (!s.clipped && s.setup->clip_grad_norm > 0) {
    s.clipped = true;
    try {
      s.grad_norm = clip_gradients(s);
    } catch (const Error& e) {
      finish(self, nullptr,
             std::make_exception_ptr(Error(e.kind(), "gradient clipping failed in step " + std::to_string(s.step) + ": " + e.message())));
      return;
    }
  }
  if (s.setup->optimizers.empty() || (s.updating && s.applied == static_cast<int>(s.setup->optimizers.size()))) {
    finish(self, collect(s), nullptr);
    return;
  }
  if (s.updating) return;
  s.updating = true;
  auto result = collect(s);
  for (std::size_t o = 0; o < s.setup->optimizers.size(); ++o) {
    auto grads = std::make_shared<std::map<std::string, Tensor>>();
    for (const std::string& name : s.setup->optimizer_params[o]) {
      auto it = result->gradients.find(name);
      if (it != result->gradients.end()) grads->emplace(name, it->second);
    }
    tell(self, my_trace_id(s), Address{s.setup->optimizers[o], my_trace_id(s)}, SendTag{"apply", s.step}, apply_atom::value,
         s.step, GradientMapPtr(std::move(grads)));
  }
}

caf::behavior program_actor(Self* self, std::shared_ptr<const ProgramSetup> setup) {
  spawn_acquired();
  HandlerSync init_sync(self);  // what init writes is published like a handler's writes
  self->state.self = self;
  self->state.setup = std::move(setup);
  auto me = [self] { return my_trace_id(self->state); };
  return {
      [=](run_atom, const RunRequestPtr& req, std::uint64_t flow) {
        Handling h(self, me(), "run", flow, self->state.step + 1, -1);
        self->state.queue.push_back(req);
        start_next(self);
      },
      [=](done_atom, std::uint64_t step, int, std::uint64_t flow) {
        Handling h(self, me(), "done", flow, step, -1);
        if (step != self->state.step) return;
        ++self->state.done;
        check_complete(self);
      },
      [=](result_atom, std::uint64_t step, int sink, const Tensor& value, double squared_norm, std::uint64_t flow) {
        Handling h(self, me(), "result", flow, step, -1);
        if (step != self->state.step || !self->state.current) return;
        self->state.sink_values.at(static_cast<std::size_t>(sink)) = value;
        self->state.sink_norms.at(static_cast<std::size_t>(sink)) = squared_norm;
        ++self->state.results;
        if (self->state.setup->comm) {
          const int b = self->state.setup->buckets->bucket_of_sink[static_cast<std::size_t>(sink)];
          if (b >= 0) {
            ++self->state.bucket_fill[static_cast<std::size_t>(b)];
            submit_buckets(self, false);
          }
        }
        check_complete(self);
      },
      [=](bucket_atom, std::uint64_t step, int bucket, double squared_norm, const TensorListPtr& grads, std::uint64_t flow) {
        Handling h(self, me(), "bucket", flow, step, -1);
        ProgramState& s = self->state;
        if (step != s.step || !s.current) return;
        const auto& entries = s.setup->buckets->buckets[static_cast<std::size_t>(bucket)];
        for (std::size_t i = 0; i < entries.size(); ++i) s.sink_values[static_cast<std::size_t>(entries[i].sink)] = (*grads)[i];
        s.bucket_norms[static_cast<std::size_t>(bucket)] = squared_norm;
        ++s.buckets_done;
        check_complete(self);
      },
      [=](reduced_atom, std::uint64_t step, int, const Tensor& outputs, std::uint64_t flow) {
        Handling h(self, me(), "reduced", flow, step, -1);
        ProgramState& s = self->state;
        if (step != s.step || !s.current) return;
        const auto values = outputs.to_vector<float>();
        std::size_t i = 0;
        for (std::size_t k = 0; k < s.sink_values.size(); ++k)
          if (s.setup->plan->sink_param[k] < 0 && s.sink_values[k].dim() == 0)
            s.sink_values[k] = Tensor::scalar(values[i++], s.sink_values[k].dtype());
        s.outputs_reduced = true;
        check_complete(self);
      },
      [=](applied_atom, std::uint64_t step, int, std::uint64_t flow) {
        Handling h(self, me(), "applied", flow, step, -1);
        if (step != self->state.step) return;
        ++self->state.applied;
        check_complete(self);
      },
      [=](fail_atom, std::uint64_t step, int kind, const std::string& what, std::uint64_t flow) {
        Handling h(self, me(), "fail", flow, step, -1);
        // Later messages of this step are ignored everywhere: actors drop a step's state when the
        // next one reaches them, so nothing waits on the failed step.
        if (step != self->state.step || !self->state.current) return;
        finish(self, nullptr, std::make_exception_ptr(Error(static_cast<ErrorKind>(kind), what)));
      },
  };
}

}  // namespace

caf::actor spawn_program_actor(caf::actor_system& sys, std::shared_ptr<const ProgramSetup> setup) {
  spawn_released();
  return sys.spawn(program_actor, std::move(setup));
}

}  // namespace troupe::actors
