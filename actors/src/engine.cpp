#include "troupe/actors/engine.hpp"

#include <algorithm>
#include <cmath>
#include <thread>

#include "actor_kinds.hpp"
#include "engine_impl.hpp"
#include "program_actor.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::actors {

namespace {

// A compiled program: the handles of its actors and a reference that keeps the actor system alive.
class ActorProgram : public Program {
 public:
  ActorProgram(std::shared_ptr<Engine::Impl> engine, PeersPtr peers, std::vector<caf::actor> helpers,
               std::map<std::string, int> counts, std::uint32_t caller_trace_id, std::shared_ptr<StepMemory> memory)
      : engine_(std::move(engine)),
        peers_(std::move(peers)),
        helpers_(std::move(helpers)),
        counts_(std::move(counts)),
        caller_(caller_trace_id),
        memory_(std::move(memory)) {}

  ~ActorProgram() override {
    // Exit messages overtake nothing a caller waits for: open requests fail in the program
    // actor's state destructor, so no future is left unset.
    auto stop = [](const auto& a) {
      mailbox_release(a);
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    };
    for (const auto& a : peers_->nodes) stop(a.actor);
    for (const caf::actor& a : helpers_) stop(a);
    stop(peers_->program.actor);
  }

  void run_async(std::vector<Tensor> inputs, StepCallback done, const kernels::RandomPosition& random) override {
    TROUPE_CHECK(done != nullptr, invalid_argument, "Program::run_async: the callback is empty");
    auto req = std::make_shared<RunRequest>();
    req->inputs = std::move(inputs);
    req->done = std::move(done);
    req->random = random;
    tell_from_outside(caller_, peers_->program, SendTag{"run", 0}, run_atom::value, RunRequestPtr(std::move(req)));
  }

  std::map<std::string, int> actor_counts() const override { return counts_; }

  std::optional<graph::MemoryPlanReport> memory_report() const override {
    if (!memory_) return std::nullopt;
    return memory_->report();
  }

  ZeroState* zero_state() const override { return peers_->gradients.zero.get(); }
  CompressionState* compression_state() const override { return peers_->gradients.compression.get(); }

  void settle() const override {
    if (peers_->gradients.zero) peers_->gradients.zero->settle();
  }

 private:
  std::shared_ptr<Engine::Impl> engine_;
  PeersPtr peers_;
  std::vector<caf::actor> helpers_;  // the gradient path's actors
  std::map<std::string, int> counts_;
  std::uint32_t caller_;
  std::shared_ptr<StepMemory> memory_;  // JIT level 3: the planned memory of the steps; null otherwise
};

}  // namespace

std::future<StepResult> Program::run_async(std::vector<Tensor> inputs, const kernels::RandomPosition& random) {
  auto promise = std::make_shared<std::promise<StepResult>>();
  std::future<StepResult> future = promise->get_future();
  run_async(
      std::move(inputs),
      [promise](StepResult* r, std::exception_ptr e) {
        if (e) promise->set_exception(e);
        else promise->set_value(std::move(*r));
      },
      random);
  return future;
}

StepResult Program::run(std::vector<Tensor> inputs, const kernels::RandomPosition& random) {
  return run_async(std::move(inputs), random).get();
}

Engine::Engine(EngineOptions options) : impl_(std::make_shared<Impl>()) {
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  impl_->threads = options.threads == 0 ? cores : options.threads;
  TROUPE_CHECK(options.max_throughput > 0, invalid_argument, "Engine: max_throughput must be positive");
  impl_->config.set("scheduler.max-threads", static_cast<int>(impl_->threads));
  // CAF's work-stealing workers run the most recently enqueued actor first, so along a backward
  // chain the gradient stages and the program actor wait until the chain is done, and no AllReduce
  // starts during backward. One FIFO queue keeps the order in which actors became ready.
  impl_->config.set("scheduler.policy",
                    options.scheduling == Scheduling::fifo ? caf::atom("sharing") : caf::atom("stealing"));
  impl_->config.set("scheduler.max-throughput", static_cast<int>(options.max_throughput));
  impl_->system = std::make_unique<caf::actor_system>(impl_->config);
}

Engine::~Engine() = default;

std::size_t Engine::threads() const { return impl_->threads; }

namespace {

// A thread each: more streams than that is a mistake, not a plan.
constexpr int kMaxStreams = 64;

Grouping grouping(const graph::TracedFunction& fn, const ProgramOptions& options) {
  const bool inference = fn.output_count() == fn.graph().outputs().size();
  const bool grouped = options.group_ops == OpGrouping::all || (options.group_ops == OpGrouping::inference && inference);
  return Grouping{grouped, grouped && inference && options.micro_batches == 1};
}

}  // namespace

std::unique_ptr<Program> Engine::compile(const graph::TracedFunction& fn, ProgramOptions options) {
  TROUPE_CHECK(options.registers >= 1, invalid_argument, "compile: registers must be at least 1, got ",
               options.registers);
  TROUPE_CHECK(options.micro_batches >= 1, invalid_argument, "compile: micro_batches must be at least 1, got ",
               options.micro_batches);
  TROUPE_CHECK(options.clip_grad_norm >= 0 && std::isfinite(options.clip_grad_norm), invalid_argument,
               "compile: clip_grad_norm must be a finite number >= 0 (0 turns clipping off), got ", options.clip_grad_norm);
  TROUPE_CHECK(options.clip_grad_norm == 0 || fn.output_count() < fn.graph().outputs().size(), invalid_argument,
               "compile: clip_grad_norm needs gradients; trace the function with_gradients()");
  const int scale_at = fn.loss_scale_parameter();
  // (A pipeline stage before the last gets the scale in the gradient it receives.)
  TROUPE_CHECK(!options.loss_scaler || fn.backward_received() ||
                   (scale_at >= 0 && fn.parameters()[static_cast<std::size_t>(scale_at)].key() ==
                                         options.loss_scaler->scale_var().key()),
               invalid_argument, "compile: loss_scaler needs a function whose backward it seeds; trace it ",
               "with_gradients(params, scaler->scale_var())");
  TROUPE_CHECK(options.loss_scaler || scale_at < 0, invalid_argument, "compile: the function's gradients are ",
               "multiplied by a loss scale; pass its GradScaler as ProgramOptions::loss_scaler so it is divided out");
  auto traced = std::make_shared<const graph::TracedFunction>(fn);
  TROUPE_CHECK(options.streams >= 0 && options.streams <= kMaxStreams, invalid_argument,
               "compile: streams must be between 0 (kernels run in the op actors) and ", kMaxStreams, ", got ",
               options.streams);
  ActorGraph lowered = lower_to_actors(*traced, grouping(*traced, options));
  if (options.defer_weight_gradients) defer_weight_gradients(lowered, traced->graph());
  assign_streams(lowered, traced->graph(), options.streams);
  auto plan = std::make_shared<const ActorGraph>(std::move(lowered));
  auto graph = std::shared_ptr<const graph::Graph>(traced, &traced->graph());
  Tracer& tracer = Tracer::instance();
  caf::actor_system& sys = *impl_->system;

  // The gradient path first: it checks the optimizers and data parallelism before anything is spawned.
  auto peers = std::make_shared<Peers>();
  GradientActors gradient_actors = spawn_gradient_path(sys, *traced, *plan, options, peers);
  for (int k = 0; k < options.streams; ++k) peers->streams.push_back(make_cpu_stream("cpu stream " + std::to_string(k)));
  for (const ActorSpec& spec : plan->actors) peers->nodes.push_back({NodeActor(), tracer.register_actor(spec.name)});
  peers->program.track = tracer.register_actor("program");
  for (std::size_t a = 0; a < plan->actors.size(); ++a)
    peers->nodes[a].actor =
        spawn_node(sys, plan, static_cast<int>(a), options.registers, peers, kind_of(plan->actors[a], graph));
  auto setup = std::make_shared<ProgramSetup>();
  setup->fn = traced;
  setup->plan = plan;
  setup->micro_batches = options.micro_batches;
  setup->clip_grad_norm = options.clip_grad_norm;
  setup->clip_mode = options.clip_mode;
  setup->loss_scaler = options.loss_scaler;
  setup->peers = peers;
  setup->comm = options.data_parallel.communicator;
  if (traced->plans_memory() && options.streams == 0) setup->memory = std::make_shared<StepMemory>(plan, options.registers);
  peers->program.actor = spawn_program_actor(sys, setup);

  std::map<std::string, int> counts = gradient_actors.counts;
  counts.insert({{"input", 1}, {"op", plan->op_count}, {"gradient", 0}, {"output", 0}});
  for (int param : plan->sink_param) ++counts[param >= 0 ? "gradient" : "output"];
  return std::make_unique<ActorProgram>(impl_, peers, std::move(gradient_actors.all), counts, tracer.register_actor("caller"),
                                        setup->memory);
}

}  // namespace troupe::actors
