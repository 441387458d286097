#include "node_actors.hpp"

#include <deque>
#include <limits>

#include "trace_hooks.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/layout.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::actors {

namespace {

std::uint64_t bytes_of(const std::vector<Tensor>& ts) {
  std::uint64_t n = 0;
  for (const Tensor& t : ts) n += t.defined() ? t.nbytes() : 0;
  return n;
}

// One output register of a producer.
struct Register {
  std::shared_ptr<const std::vector<Tensor>> values;
  int pending = 0;  // consumers that have not released it yet
  bool busy = false;
};

struct NodeState {
  std::shared_ptr<const ActorPlan> plan;
  std::shared_ptr<const graph::Graph> graph;
  const ActorSpec* spec = nullptr;
  const graph::OpDef* def = nullptr;
  int index = 0;
  PeersPtr peers;
  // The step in progress; state of older steps is dropped when a newer one shows up, so a failed
  // step leaves nothing behind.
  StepContextPtr ctx;
  std::uint64_t step = 0;
  int next_mb = 0;
  std::vector<Register> regs;
  std::vector<std::deque<ReadyPtr>> queues;  // per producer, in spec->producers order
  std::vector<Tensor> sink_parts;            // sinks: one value per micro-batch
  bool failed = false;
  caf::abstract_actor* self = nullptr;
  ~NodeState() { mailbox_acquire(self); }
  static inline const char* name = "troupe.node";
};

using Self = caf::stateful_actor<NodeState>;

std::uint32_t trace_id(const NodeState& s, int actor) { return s.peers->trace_ids[static_cast<std::size_t>(actor)]; }
std::uint32_t program_trace_id(const NodeState& s) { return s.peers->trace_ids.back(); }

void begin_step(NodeState& s, const StepContextPtr& ctx) {
  s.ctx = ctx;
  s.step = ctx->step;
  s.next_mb = 0;
  s.failed = false;
  for (Register& r : s.regs) r = Register{};
  for (auto& q : s.queues) q.clear();
  s.sink_parts.clear();
}

// Makes `ctx`'s step current if it is newer; false for messages of a finished (or failed) step.
bool accept_step(NodeState& s, const StepContextPtr& ctx) {
  if (ctx->step < s.step) return false;
  if (ctx->step > s.step || !s.ctx) begin_step(s, ctx);
  return true;
}

int free_register(const NodeState& s) {
  for (std::size_t r = 0; r < s.regs.size(); ++r)
    if (!s.regs[r].busy) return static_cast<int>(r);
  return -1;
}

void report_failure(Self* self, const std::string& what, ErrorKind kind) {
  NodeState& s = self->state;
  s.failed = true;
  const std::uint64_t flow = trace_send(trace_id(s, s.index), program_trace_id(s), "fail", s.step, s.next_mb);
  post(self, s.peers->program, fail_atom::value, s.step, static_cast<int>(kind), what, flow);
}

// Puts `values` for micro-batch `mb` into a free register and tells every consumer.
void emit(Self* self, int mb, std::shared_ptr<const std::vector<Tensor>> values) {
  NodeState& s = self->state;
  const auto& consumers = s.spec->consumers;
  if (consumers.empty()) return;  // dead value: nobody reads it
  const int r = free_register(s);
  Register& reg = s.regs[static_cast<std::size_t>(r)];
  reg.values = values;
  reg.pending = static_cast<int>(consumers.size());
  reg.busy = true;
  const std::uint64_t bytes = bytes_of(*values);
  for (int c : consumers) {
    auto msg = std::make_shared<Ready>();
    msg->ctx = s.ctx;
    msg->producer = s.index;
    msg->mb = mb;
    msg->reg = r;
    msg->values = values;
    msg->flow = trace_send(trace_id(s, s.index), trace_id(s, c), "ready", s.step, mb, bytes);
    post(self, s.peers->actors[static_cast<std::size_t>(c)], ready_atom::value, ReadyPtr(std::move(msg)));
  }
}

void report_done(Self* self) {
  NodeState& s = self->state;
  const std::uint64_t flow = trace_send(trace_id(s, s.index), program_trace_id(s), "done", s.step, -1);
  post(self, s.peers->program, done_atom::value, s.step, s.index, flow);
}

// Pops the front of every input queue and releases those registers to their producers.
void release_inputs(Self* self) {
  NodeState& s = self->state;
  for (std::size_t p = 0; p < s.queues.size(); ++p) {
    const ReadyPtr r = s.queues[p].front();
    s.queues[p].pop_front();
    const int producer = s.spec->producers[p];
    const std::uint64_t flow = trace_send(trace_id(s, s.index), trace_id(s, producer), "release", s.step, r->mb);
    post(self, s.peers->actors[static_cast<std::size_t>(producer)], release_atom::value, s.step, r->reg, flow);
  }
}

bool inputs_ready(const NodeState& s) {
  for (const auto& q : s.queues)
    if (q.empty() || q.front()->mb != s.next_mb) return false;
  return true;
}

const Tensor& input_value(const NodeState& s, const InputRef& ref) {
  switch (ref.from) {
    case InputRef::From::parameter: return s.ctx->parameters[static_cast<std::size_t>(ref.parameter)];
    case InputRef::From::constant: return ref.constant;
    case InputRef::From::producer: break;
  }
  for (std::size_t p = 0; p < s.spec->producers.size(); ++p)
    if (s.spec->producers[p] == ref.producer) return s.queues[p].front()->values->at(static_cast<std::size_t>(ref.output));
  fail(ErrorKind::runtime, "actor '", s.spec->name, "' has no queue for producer ", ref.producer);
}

// Runs the op for micro-batch next_mb; false if it failed (the failure is reported).
bool fire_op(Self* self) {
  NodeState& s = self->state;
  const graph::Node& node = s.graph->node(s.spec->node);
  HandlerTrace trace(trace_id(s, s.index), "compute", 0, s.step, s.next_mb);
  std::shared_ptr<std::vector<Tensor>> outputs;
  try {
    std::vector<Tensor> in;
    for (const InputRef& ref : s.spec->inputs) in.push_back(input_value(s, ref));
    std::vector<Shape> shapes;
    const graph::SymBindings& bindings = s.ctx->bindings[static_cast<std::size_t>(s.next_mb)];
    for (graph::ValueId o : node.outputs) shapes.push_back(graph::bind(s.graph->value(o).info.shape, bindings));
    outputs = std::make_shared<std::vector<Tensor>>(s.def->compute(in, graph::ComputeContext{node.attrs, shapes, node.label}));
    TROUPE_CHECK(outputs->size() == node.outputs.size(), runtime, "computed ", outputs->size(), " outputs, expected ",
                 node.outputs.size());
  } catch (const Error& e) {
    report_failure(self, "op '" + s.spec->name + "' failed in step " + std::to_string(s.step) + ", micro-batch " +
                             std::to_string(s.next_mb) + ": " + e.message(),
                   e.kind());
    return false;
  } catch (const std::exception& e) {
    report_failure(self, "op '" + s.spec->name + "' failed in step " + std::to_string(s.step) + ", micro-batch " +
                             std::to_string(s.next_mb) + ": " + e.what(),
                   ErrorKind::runtime);
    return false;
  }
  release_inputs(self);
  emit(self, s.next_mb, std::move(outputs));
  return true;
}

// A sink keeps micro-batch `next_mb`'s value and, after the last, hands the combined result on.
bool fire_sink(Self* self) {
  NodeState& s = self->state;
  s.sink_parts.push_back(input_value(s, s.spec->inputs[0]));
  release_inputs(self);
  if (s.next_mb + 1 < s.ctx->micro_batches) return true;
  Tensor result;
  try {
    if (s.sink_parts.size() == 1) {
      result = s.sink_parts[0];
    } else if (s.spec->average) {
      // Each micro-batch counts by its share of the rows, so a mean over the rows (the loss, its
      // gradients) comes out as the whole batch's mean even when the micro-batches differ in size.
      result = ops::mul(s.sink_parts[0], s.ctx->weights[0]);
      for (std::size_t k = 1; k < s.sink_parts.size(); ++k)
        result = ops::add(result, ops::mul(s.sink_parts[k], s.ctx->weights[k]));
    } else {
      result = ops::concat(s.sink_parts, 0);
    }
  } catch (const Error& e) {
    report_failure(self, "'" + s.spec->name + "' could not combine micro-batches: " + e.message(), e.kind());
    return false;
  }
  s.sink_parts.clear();
  // The parallel clip path: this gradient's share of the global norm, taken here while other
  // stages of backward still run, instead of in one pass after the step.
  double squared_norm = std::numeric_limits<double>::quiet_NaN();
  if (s.spec->gradient && s.ctx->gradient_norms) {
    try {
      squared_norm = ops::squared_norm(result);
    } catch (const Error& e) {
      report_failure(self, "'" + s.spec->name + "' could not take its gradient norm: " + e.message(), e.kind());
      return false;
    }
  }
  const std::uint64_t flow =
      trace_send(trace_id(s, s.index), program_trace_id(s), "result", s.step, -1, result.nbytes());
  post(self, s.peers->program, result_atom::value, s.step, s.spec->sink, result, squared_norm, flow);
  return true;
}

// Fires as long as the register protocol allows.
void pump(Self* self) {
  NodeState& s = self->state;
  if (!s.ctx || s.failed) return;
  const int m = s.ctx->micro_batches;
  while (s.next_mb < m) {
    const bool needs_register = !s.spec->consumers.empty();
    if (s.spec->kind == ActorSpec::Kind::input) {
      if (needs_register && free_register(s) < 0) return;
      emit(self, s.next_mb, std::make_shared<const std::vector<Tensor>>(s.ctx->inputs[static_cast<std::size_t>(s.next_mb)]));
    } else {
      if (!inputs_ready(s)) return;
      if (s.spec->kind == ActorSpec::Kind::op && needs_register && free_register(s) < 0) return;
      const bool ok = s.spec->kind == ActorSpec::Kind::op ? fire_op(self) : fire_sink(self);
      if (!ok) return;
    }
    if (++s.next_mb == m && s.spec->kind != ActorSpec::Kind::sink) report_done(self);
  }
}

caf::behavior node_actor(Self* self, std::shared_ptr<const ActorPlan> plan, int index,
                         std::shared_ptr<const graph::Graph> graph, int registers, PeersPtr peers) {
  spawn_acquired();
  HandlerSync init_sync(self);  // what init writes is published like a handler's writes
  NodeState& s = self->state;
  s.self = self;
  s.plan = std::move(plan);
  s.graph = std::move(graph);
  s.index = index;
  s.spec = &s.plan->actors[static_cast<std::size_t>(index)];
  if (s.spec->kind == ActorSpec::Kind::op) s.def = &graph::OpRegistry::instance().get(s.graph->node(s.spec->node).op);
  s.peers = std::move(peers);
  s.regs.resize(static_cast<std::size_t>(registers));
  s.queues.resize(s.spec->producers.size());
  return {
      [=](start_atom, const StepContextPtr& ctx, std::uint64_t flow) {
        HandlerSync sync(self);
        NodeState& st = self->state;
        HandlerTrace trace(trace_id(st, st.index), "start", flow, ctx->step, -1);
        begin_step(st, ctx);
        pump(self);
      },
      [=](ready_atom, const ReadyPtr& r) {
        HandlerSync sync(self);
        NodeState& st = self->state;
        HandlerTrace trace(trace_id(st, st.index), "ready", r->flow, r->ctx->step, r->mb);
        if (!accept_step(st, r->ctx)) return;
        for (std::size_t p = 0; p < st.spec->producers.size(); ++p)
          if (st.spec->producers[p] == r->producer) st.queues[p].push_back(r);
        pump(self);
      },
      [=](release_atom, std::uint64_t step, int reg, std::uint64_t flow) {
        HandlerSync sync(self);
        NodeState& st = self->state;
        HandlerTrace trace(trace_id(st, st.index), "release", flow, step, -1);
        if (step != st.step) return;
        Register& r = st.regs.at(static_cast<std::size_t>(reg));
        if (r.busy && --r.pending == 0) r = Register{};
        pump(self);
      },
  };
}

struct OptimizerState {
  std::shared_ptr<graph::Optimizer> optimizer;
  int index = 0;
  std::uint32_t trace_id = 0;
  PeersPtr peers;
  caf::abstract_actor* self = nullptr;
  ~OptimizerState() { mailbox_acquire(self); }
  static inline const char* name = "troupe.optimizer";
};

caf::behavior optimizer_actor(caf::stateful_actor<OptimizerState>* self, std::shared_ptr<graph::Optimizer> optimizer,
                              int index, std::uint32_t trace_id, PeersPtr peers) {
  spawn_acquired();
  HandlerSync init_sync(self);  // what init writes is published like a handler's writes
  self->state.self = self;
  self->state.optimizer = std::move(optimizer);
  self->state.index = index;
  self->state.trace_id = trace_id;
  self->state.peers = std::move(peers);
  return {
      [=](apply_atom, std::uint64_t step, const GradientMapPtr& grads, std::uint64_t flow) {
        HandlerSync sync(self);
        OptimizerState& st = self->state;
        HandlerTrace trace(st.trace_id, "apply", flow, step, -1);
        const std::uint32_t program = st.peers->trace_ids.back();
        try {
          // The step owns the parameters' grad() for the update, then leaves them empty.
          for (const graph::Var& p : st.optimizer->parameters()) {
            auto it = grads->find(p.name());
            if (it == grads->end()) p.zero_grad();
            else p.set_grad(it->second);
          }
          st.optimizer->step();
          st.optimizer->zero_grad();
        } catch (const Error& e) {
          const std::uint64_t f = trace_send(st.trace_id, program, "fail", step, -1);
          post(self, st.peers->program, fail_atom::value, step, static_cast<int>(e.kind()),
                     std::string("optimizer ") + std::to_string(st.index) + " failed in step " + std::to_string(step) +
                         ": " + e.message(),
                     f);
          return;
        }
        const std::uint64_t f = trace_send(st.trace_id, program, "applied", step, -1);
        post(self, st.peers->program, applied_atom::value, step, st.index, f);
      },
  };
}

}  // namespace

caf::actor spawn_node_actor(caf::actor_system& sys, std::shared_ptr<const ActorPlan> plan, int index,
                            std::shared_ptr<const graph::Graph> graph, int registers, PeersPtr peers) {
  spawn_released();
  return sys.spawn(node_actor, std::move(plan), index, std::move(graph), registers, std::move(peers));
}

caf::actor spawn_optimizer_actor(caf::actor_system& sys, std::shared_ptr<graph::Optimizer> optimizer, int index,
                                 std::uint32_t trace_id, PeersPtr peers) {
  spawn_released();
  return sys.spawn(optimizer_actor, std::move(optimizer), index, trace_id, std::move(peers));
}

}  // namespace troupe::actors
