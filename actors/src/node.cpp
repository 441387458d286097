#include "node.hpp"

#include <algorithm>

#include "collective_order.hpp"
#include "step_memory.hpp"
#include "zero_shard.hpp"

namespace troupe::actors {

namespace {

std::uint64_t bytes_of(const std::vector<Tensor>& ts) {
  std::uint64_t n = 0;
  for (const Tensor& t : ts) n += t.defined() ? t.nbytes() : 0;
  return n;
}

}  // namespace

Node::Node(NodeActor::pointer self, std::shared_ptr<const ActorGraph> plan, int index, int registers,
           PeersPtr peers, std::shared_ptr<NodeKind> kind)
    : self_(self),
      plan_(std::move(plan)),
      spec_(&plan_->actors[static_cast<std::size_t>(index)]),
      index_(index),
      registers_(registers),
      peers_(std::move(peers)),
      kind_(std::move(kind)),
      in_(spec_->producers),
      out_(registers, static_cast<int>(spec_->consumers.size())) {
  const auto at = std::find(plan_->collectives.begin(), plan_->collectives.end(), index_);
  if (at != plan_->collectives.end()) collective_ = static_cast<int>(at - plan_->collectives.begin());
  for (const InputRef& ref : spec_->inputs)
    if (ref.from == InputRef::From::parameter) parameters_.push_back(ref.parameter);
  if (spec_->stream >= 0) stream_ = peers_->streams.at(static_cast<std::size_t>(spec_->stream)).get();
}

Suspension NodeKind::begin(Node& node, int) {
  fail(ErrorKind::runtime, "'", node.spec().name, "' does not suspend its acts");
}

int Node::waits(int mb) const {
  const int memory = memory_waits(ctx_->memory.get(), index_, mb);
  if (collective_ < 0) return memory;
  const CollectiveOrder order(static_cast<int>(plan_->collectives.size()), ctx_->micro_batches, registers_);
  return memory + (order.waits(collective_, mb) ? 1 : 0);
}

void Node::signal_next_collective(int mb) {
  if (collective_ < 0) return;
  const CollectiveOrder order(static_cast<int>(plan_->collectives.size()), ctx_->micro_batches, registers_);
  if (const auto next = order.next(collective_, mb)) {
    const int actor = plan_->collectives[static_cast<std::size_t>(next->first)];
    tell(self_, track(), peers_->at(actor), SendTag{"go", step_, next->second}, go_atom::value, ctx_, next->second);
  }
}

const Tensor& Node::input(const InputRef& ref) const {
  switch (ref.from) {
    case InputRef::From::parameter:
      // (ZeRO-1: the firing rule waited for the last step's all-gather to write it.)
      return ctx_->parameters[static_cast<std::size_t>(ref.parameter)];
    case InputRef::From::constant: return ref.constant;
    case InputRef::From::producer: break;
  }
  return in_.value(ref.producer, ref.output);
}

std::vector<Tensor> Node::take_inputs() {
  std::vector<Tensor> values;
  values.reserve(spec_->inputs.size());
  for (const InputRef& ref : spec_->inputs) values.push_back(input(ref));
  in_.take([this](const Taken& t) { taken_.push_back(t); });
  inputs_taken_ = true;
  return values;
}

void Node::on_start(const StepContextPtr& ctx) {
  begin_step(ctx);
  pump();
}

void Node::on_ready(ReadyPtr r) {
  // Messages of a finished (or failed) step are dropped; the first of a newer step begins it.
  if (r->ctx->step < step_) return;
  if (r->ctx->step > step_ || !ctx_) begin_step(r->ctx);
  in_.push(std::move(r));
  pump();
}

void Node::on_go(const StepContextPtr& ctx, int mb) {
  if (ctx->step < step_) return;
  if (ctx->step > step_ || !ctx_) begin_step(ctx);
  ++gos_.at(static_cast<std::size_t>(mb));
  pump();
}

void Node::on_acted(std::uint64_t step, int mb, std::exception_ptr error) {
  if (step != step_ || failed_ || !pending_ || pending_->mb != mb) return;  // a failed step's
  Pending p = std::move(*pending_);
  pending_.reset();
  std::optional<ActMemory> memory;
  memory.emplace(ctx_->memory.get(), index_, mb, p.allocations);
  if (!complete(mb, memory, [&] { return p.resume(error); })) return;
  if (++next_mb_ == ctx_->micro_batches) return report_done();
  pump();
}

void Node::on_synced(std::uint64_t step, int mb) {
  if (step != step_ || failed_ || syncing_ != mb) return;
  syncing_.reset();
  if (!fire(mb)) return;  // (a failure among the inputs' events, which fire reports)
  if (++next_mb_ == ctx_->micro_batches) return report_done();
  pump();
}

void Node::on_gathered(std::uint64_t step, std::exception_ptr error) {
  if (step != step_ || failed_) return;
  if (error) {
    reporting_failure([&] {
      try {
        std::rethrow_exception(error);
      } catch (const Error& e) {
        throw Error(e.kind(), "'" + spec_->name + "' cannot read its parameters in step " + std::to_string(step_) + ": " +
                                  e.message());
      }
    });
    return;
  }
  --ungathered_;
  pump();
}

void Node::on_release(std::uint64_t step, int reg) {
  if (step != step_) return;
  out_.release(reg);
  pump();
}

void Node::begin_step(const StepContextPtr& ctx) {
  ctx_ = ctx;
  step_ = ctx->step;
  next_mb_ = 0;
  failed_ = false;
  in_.clear();
  out_.clear();
  taken_.clear();
  inputs_taken_ = false;
  gos_.assign(static_cast<std::size_t>(ctx->micro_batches), 0);
  pending_.reset();
  syncing_.reset();
  await_parameters();
}

void Node::await_parameters() {
  ungathered_ = 0;
  const std::shared_ptr<ZeroShard>& zero = peers_->gradients.zero;
  if (!zero) return;
  const AddressOf<NodeActor>& me = peers_->at(index_);
  const std::uint64_t step = step_;
  reporting_failure([&] {
    for (int parameter : parameters_) {
      const bool waits = !zero->when_gathered(parameter, [me, step, track = zero->track()](std::exception_ptr e) {
        tell_from_outside(track, me, SendTag{"gathered", step}, gathered_atom::value, step, e);
      });
      ungathered_ += waits ? 1 : 0;
    }
  });
}

void Node::pump() {
  if (!ctx_ || failed_ || pending_ || syncing_ || ungathered_ > 0) return;
  const auto may_act = [this](int mb) { return gos_[static_cast<std::size_t>(mb)] >= waits(mb); };
  if (act_while_ready(next_mb_, ctx_->micro_batches, in_, out_, may_act, [this](int mb) { return fire(mb); }))
    report_done();
}

void Node::report_done() {
  if (kind_->reports_done()) tell(self_, track(), peers_->program, SendTag{"done", step_}, done_atom::value, step_, index_);
}

// One firing: act, give the inputs back, pass the outputs on. What the act allocates and drops,
// the inputs it lets go of included, belongs to the act's planned memory (step_memory.hpp).
bool Node::fire(int mb) {
  std::optional<StreamGuard> queued;  // the step's work, for the stream (Stream::restart)
  if (stream_) queued.emplace(*stream_, step_);
  if (!inputs_written(mb)) return false;
  if (kind_->suspends()) {
    suspend(mb);
    return false;  // the act is not over: on_acted goes on from here
  }
  std::optional<ActMemory> memory;
  memory.emplace(ctx_->memory.get(), index_, mb);
  return complete(mb, memory, [&] { return kind_->act(*this, mb); });
}

bool Node::inputs_written(int mb) {
  if (stream_) {  // (under the act's guard)
    in_.for_each_oldest([this](int producer, const Event& written) {
      if (plan_->actors[static_cast<std::size_t>(producer)].stream != spec_->stream) stream_->wait(written);
    });
    return true;
  }
  std::vector<Event> unwritten;
  in_.for_each_oldest([&](int, const Event& written) {
    if (!written.done() || written.error()) unwritten.push_back(written);
  });
  if (unwritten.empty()) return true;
  const Event all = Event::all(unwritten);
  if (all.done()) {  // written meanwhile, or one failed: its error names the op whose kernel failed
    if (!all.error()) return true;
    reporting_failure([&] { std::rethrow_exception(all.error()); });
    return false;
  }
  syncing_ = mb;
  all.then([me = peers_->at(index_), step = step_, mb](std::exception_ptr e) {
    tell_from_outside(me.track, me, SendTag{"synced", step, mb}, synced_atom::value, step, mb, e);
  });
  return false;
}

// The outside part (a collective) runs in its queue's order, so the next act in the collectives'
// order may begin as soon as this one is queued.
void Node::suspend(int mb) {
  Suspension s;
  std::size_t allocations = 0;
  {
    ActMemory memory(ctx_->memory.get(), index_, mb);
    if (!reporting_failure([&] { s = kind_->begin(*this, mb); })) return;
    allocations = memory.suspend();
  }
  pending_ = Pending{mb, allocations, std::move(s.resume)};
  const AddressOf<NodeActor>& me = peers_->at(index_);
  const std::uint64_t step = step_;
  s.launch([me, step, mb, track = s.track](std::exception_ptr e) {
    tell_from_outside(track, me, SendTag{"acted", step, mb}, acted_atom::value, step, mb, e);
  });
  signal_next_collective(mb);
}

template <class Make>
bool Node::complete(int mb, std::optional<ActMemory>& memory, Make&& make) {
  Values values;
  if (!reporting_failure([&] { values = make(); })) return false;
  release_inputs();
  if (spec_->consumers.empty()) values.reset();  // a dead value, dropped within the act
  if (values) memory->emitted(*values);
  memory.reset();  // the act's memory is over before anyone hears of its outputs
  if (values) emit(mb, std::move(values), stream_ ? stream_->record() : Event());
  if (!reporting_failure([&] { kind_->after_act(*this); })) return false;
  // The memory plan's edges: acts whose memory this one's must be over before they begin.
  for_each_memory_signal(ctx_->memory.get(), index_, mb, [this](int actor, int m) {
    tell(self_, track(), peers_->at(actor), SendTag{"go", step_, m}, go_atom::value, ctx_, m);
  });
  if (!kind_->suspends()) signal_next_collective(mb);
  return true;
}

// The last consumer's message takes the producer's handle, so the values live only in the
// consumers' hands (registers.hpp).
void Node::emit(int mb, Values values, const Event& written) {
  const int reg = out_.write();
  const std::uint64_t bytes = bytes_of(*values);
  for (std::size_t k = 0; k < spec_->consumers.size(); ++k) {
    const bool last = k + 1 == spec_->consumers.size();
    auto msg = std::make_shared<Ready>(Ready{ctx_, index_, mb, reg, last ? std::move(values) : values, written});
    tell(self_, track(), peers_->at(spec_->consumers[k]), SendTag{"ready", step_, mb, bytes}, ready_atom::value,
         ReadyPtr(std::move(msg)));
  }
}

void Node::release_inputs() {
  const auto give_back = [this](const Taken& t) {
    tell(self_, track(), peers_->at(t.producer), SendTag{"release", step_, t.mb}, release_atom::value, step_, t.reg);
  };
  if (!inputs_taken_) return in_.take(give_back);
  for (const Taken& t : taken_) give_back(t);
  taken_.clear();
  inputs_taken_ = false;
}

template <class F>
bool Node::reporting_failure(F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    report_failure(e.message(), e.kind());
  } catch (const std::exception& e) {
    report_failure("'" + spec_->name + "' failed in step " + std::to_string(step_) + ": " + e.what(), ErrorKind::runtime);
  }
  return false;
}

void Node::report_failure(const std::string& what, ErrorKind kind) {
  failed_ = true;
  tell_to(peers_->program, "fail", 0, fail_atom::value, step_, static_cast<int>(kind), what);
}

namespace {

struct NodeState {
  std::unique_ptr<Node> node;
  caf::abstract_actor* self = nullptr;
  ~NodeState() { state_closing(&self); }
  static inline const char* name = "troupe.node";
};

NodeActor::behavior_type node_actor(NodeActor::stateful_pointer<NodeState> self, std::shared_ptr<const ActorGraph> plan, int index,
                         int registers, PeersPtr peers, std::shared_ptr<NodeKind> kind) {
  const ActorInit init(self);
  self->state.node = std::make_unique<Node>(self, std::move(plan), index, registers, std::move(peers), std::move(kind));
  Node* n = self->state.node.get();
  return {
      [=](start_atom, const StepContextPtr& ctx, std::uint64_t flow) {
        Handling h(self, n->track(), "start", flow, ctx->step, -1);
        n->on_start(ctx);
      },
      // By mutable reference, so the handle moves out of the message (registers.hpp).
      [=](ready_atom, ReadyPtr& r, std::uint64_t flow) {
        Handling h(self, n->track(), "ready", flow, r->ctx->step, r->mb);
        n->on_ready(std::move(r));
      },
      [=](release_atom, std::uint64_t step, int reg, std::uint64_t flow) {
        Handling h(self, n->track(), "release", flow, step, -1);
        n->on_release(step, reg);
      },
      [=](go_atom, const StepContextPtr& ctx, int mb, std::uint64_t flow) {
        Handling h(self, n->track(), "go", flow, ctx->step, mb);
        n->on_go(ctx, mb);
      },
      [=](acted_atom, std::uint64_t step, int mb, const std::exception_ptr& error, std::uint64_t flow) {
        Handling h(self, n->track(), "acted", flow, step, mb);
        n->on_acted(step, mb, error);
      },
      // (the failure, if any, is the inputs' events' to report)
      [=](synced_atom, std::uint64_t step, int mb, const std::exception_ptr&, std::uint64_t flow) {
        Handling h(self, n->track(), "synced", flow, step, mb);
        n->on_synced(step, mb);
      },
      [=](gathered_atom, std::uint64_t step, const std::exception_ptr& error, std::uint64_t flow) {
        Handling h(self, n->track(), "gathered", flow, step, -1);
        n->on_gathered(step, error);
      },
  };
}

}  // namespace

NodeActor spawn_node(caf::actor_system& sys, std::shared_ptr<const ActorGraph> plan, int index, int registers,
                      PeersPtr peers, std::shared_ptr<NodeKind> kind) {
  spawn_released();
  return sys.spawn(node_actor, std::move(plan), index, registers, std::move(peers), std::move(kind));
}

}  // namespace troupe::actors
