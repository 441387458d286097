// Stream-ordered programs (ProgramOptions::streams, troupe/kernels/stream.hpp): an op actor queues
// its kernels on its stream and passes its outputs on before they run, so no scheduler thread
// waits for a kernel; consumers on other streams wait on the stream; ops that read values on the
// host, and the sinks, act once their inputs are written, told by a message; training steps give
// the bits of kernels run in the actors; a kernel failing on a stream fails the step naming its op
// and the next step runs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "actor_graph.hpp"
#include "actors/tiny_gpt.hpp"
#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/embedding.hpp"
#include "troupe/kernels/registry.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::actors::ActorSpec;
using troupe::actors::Engine;
using troupe::actors::EngineOptions;
using troupe::actors::OpGrouping;
using troupe::actors::ProgramOptions;
using troupe::actors::StepResult;

namespace {

const SymDim kBatch = SymDim::symbol("batch");

// The gate test_gated_copy's kernel waits at: open unless a test closes it.
std::mutex gate_mutex;
std::shared_future<void> gate = [] {
  std::promise<void> p;
  p.set_value();
  return p.get_future().share();
}();
std::shared_future<void> current_gate() {
  std::lock_guard<std::mutex> lock(gate_mutex);
  return gate;
}
// Closes the gate while it lives; open() (or the end of its scope) opens it.
struct ClosedGate {
  std::promise<void> p;
  ClosedGate() {
    std::lock_guard<std::mutex> lock(gate_mutex);
    gate = p.get_future().share();
  }
  void open() {
    if (!opened) p.set_value();
    opened = true;
  }
  ~ClosedGate() { open(); }
  bool opened = false;
};

// test_probe counts its acts (the host part, when the actor acts) apart from its kernel's runs.
std::atomic<int> probe_acts{0}, probe_runs{0};
std::atomic<bool> probe_fails{false};

std::vector<ValueInfo> infer_same(const InferContext& c) { return {c.inputs[0]}; }

std::atomic<int> gated_copies{0};  // test_gated_copy's kernel runs finished

void gated_copy_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const troupe::Attrs&) {
  current_gate().wait();
  out[0].copy_from(in[0]);
  ++gated_copies;
}
TROUPE_REGISTER_KERNEL("test_gated_copy", cpu, f32, gated_copy_kernel);
TROUPE_REGISTER_KERNEL("test_gated_copy", cpu, i64, gated_copy_kernel);
TROUPE_DEFINE_OP({.name = "test_gated_copy", .infer = infer_same, .kernel = "test_gated_copy"});

void probe_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const troupe::Attrs&) {
  ++probe_runs;
  if (probe_fails) fail(ErrorKind::runtime, "the probe's kernel was told to fail");
  out[0].copy_from(in[0]);
}
TROUPE_REGISTER_KERNEL("test_probe", cpu, f32, probe_kernel);
std::vector<Tensor> compute_probe(const std::vector<Tensor>& in, const ComputeContext&) {
  ++probe_acts;
  std::vector<Tensor> out{Tensor::empty(in[0].shape(), in[0].dtype())};
  dispatch("test_probe", in, out);
  return out;
}
TROUPE_DEFINE_OP({.name = "test_probe", .infer = infer_same, .compute = compute_probe});

// test_host_reader reads its input on the host (as a range check would): it notes how many gated
// copies had finished when it did.
std::atomic<int> copies_seen_by_reader{-1};
std::vector<Tensor> compute_host_reader(const std::vector<Tensor>& in, const ComputeContext&) {
  copies_seen_by_reader = gated_copies.load();
  return {in[0]};
}
TROUPE_DEFINE_OP({.name = "test_host_reader", .infer = infer_same, .compute = compute_host_reader, .host_reads = true});

StepResult wait(std::future<StepResult> f) {
  EXPECT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the step did not finish";
  return f.get();
}

// Polls `done` for up to 10 s.
template <class F>
bool eventually(F&& done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

bool same(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && test::values(a) == test::values(b); }

// y = 2 * probe(gated_copy(x)), one actor per op.
TracedFunction gated_probe() {
  return trace([](const std::vector<Var>& in) {
    return std::vector<Var>{apply1("test_probe", {apply1("test_gated_copy", {in[0]})}) * 2.0};
  }, {{"x", {kBatch, 3}}});
}

}  // namespace

TEST(Streams, AnActPassesItsOutputsOnBeforeItsKernelsRunAndNoSchedulerThreadWaits) {
  Engine engine(EngineOptions{1});  // one scheduler thread: a handler waiting for a kernel would stall everything
  ProgramOptions options;
  options.streams = 2;
  options.group_ops = OpGrouping::none;
  auto gated = engine.compile(gated_probe(), options);
  auto plain = engine.compile(trace([](const std::vector<Var>& in) { return std::vector<Var>{in[0] + 1.0}; },
                                    {{"x", {kBatch, 3}}}),
                              {});
  const Tensor x = test::random_tensor({4, 3}, 1);
  probe_acts = probe_runs = 0;
  ClosedGate closed;
  auto result = gated->run_async({x});
  // The probe's actor acts (it queues its kernel behind the gated copy on the other stream) while
  // the copy's kernel is held: its input was passed on before it was written.
  ASSERT_TRUE(eventually([] { return probe_acts.load() == 1; }));
  EXPECT_EQ(probe_runs.load(), 0);
  // Another program runs whole meanwhile on the one scheduler thread.
  EXPECT_TRUE(same(wait(plain->run_async({x})).outputs[0], kernels::add(x, 1.0)));
  EXPECT_EQ(result.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  closed.open();
  const StepResult r = wait(std::move(result));
  EXPECT_EQ(probe_runs.load(), 1);
  EXPECT_TRUE(same(r.outputs[0], kernels::mul(x, 2.0)));
}

TEST(Streams, OpActorsTakeTheStreamsInTurnAndOpsReadingOnTheHostStayOff) {
  Generator gen(3);
  test::TinyGpt model(gen);
  const TracedFunction step = model.step();
  actors::ActorGraph plan = actors::lower_to_actors(step, {false, false});
  actors::assign_streams(plan, step.graph(), 3);
  int next = 0, on_host = 0;
  for (const ActorSpec& a : plan.actors) {
    if (a.kind != ActorSpec::Kind::op) {
      EXPECT_EQ(a.stream, -1) << a.name;
      continue;
    }
    const OpDef& def = OpRegistry::instance().get(step.graph().node(a.members[0].node).op);
    if (def.host_reads) {
      EXPECT_EQ(a.stream, -1) << a.name;
      ++on_host;
    } else {
      EXPECT_EQ(a.stream, next++ % 3) << a.name;
    }
  }
  EXPECT_EQ(on_host, 4);  // the embedding, its gradient, the loss and its gradient (range checks)
}

TEST(Streams, AnOpReadingValuesOnTheHostWaitsUntilTheyAreWritten) {
  Generator gen(5);
  Embedding table(32, 4, gen);
  const TracedFunction fn = trace([&](const std::vector<Var>& in) {
    return std::vector<Var>{table(apply1("test_host_reader", {apply1("test_gated_copy", {in[0]})}))};
  }, {{"ids", {kBatch, 3}, DType::i64}});
  Engine engine(EngineOptions{1});
  ProgramOptions options;
  options.streams = 1;
  options.group_ops = OpGrouping::none;
  auto program = engine.compile(fn, options);
  for (int step = 0; step < 2; ++step) {
    const Tensor ids = test::tiny_gpt_tokens(2, 11 + static_cast<std::uint64_t>(step)).slice(1, 0, 3).contiguous();
    gated_copies = 0;
    copies_seen_by_reader = -1;
    ClosedGate closed;
    auto result = program->run_async({ids});
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the reader must not read them now
    EXPECT_EQ(copies_seen_by_reader.load(), -1);
    closed.open();
    const Tensor y = wait(std::move(result)).outputs[0];
    EXPECT_EQ(copies_seen_by_reader.load(), 1) << "the reader read the ids before they were written";
    EXPECT_TRUE(same(y, kernels::embedding(table.weight.tensor(), ids))) << "step " << step;
  }
}

TEST(Streams, TrainingStepsGiveTheBitsOfKernelsRunInTheActors) {
  for (int level : {1, 3}) {
    for (int micro_batches : {1, 2}) {
      SCOPED_TRACE("level " + std::to_string(level) + ", micro-batches " + std::to_string(micro_batches));
      std::map<int, std::pair<std::vector<double>, std::map<std::string, Tensor>>> runs;
      for (int streams : {0, 1, 3}) {
        Generator gen(3);
        test::TinyGpt model(gen);
        Engine engine(EngineOptions{2});
        ProgramOptions options;
        options.streams = streams;
        options.micro_batches = micro_batches;
        options.clip_grad_norm = 0.5;
        options.optimizers = {std::make_shared<AdamW>(model.parameters(), test::tiny_gpt_adamw())};
        auto program = engine.compile(model.step().optimized(level), options);
        for (int s = 0; s < 3; ++s) {
          const StepResult r = wait(program->run_async({test::tiny_gpt_tokens(4, 10 + s), test::tiny_gpt_tokens(4, 20 + s)}));
          runs[streams].first.push_back(r.outputs[0].item());
          runs[streams].first.push_back(r.grad_norm);
        }
        for (const auto& [name, p] : model.named_parameters()) runs[streams].second[name] = p.tensor().clone();
      }
      for (int streams : {1, 3}) {
        EXPECT_EQ(runs[streams].first, runs[0].first) << streams << " streams: losses and norms";
        for (const auto& [name, w] : runs[0].second)
          EXPECT_TRUE(same(runs[streams].second.at(name), w)) << streams << " streams: " << name;
      }
    }
  }
}

TEST(Streams, AKernelFailingOnAStreamFailsTheStepNamingItsOpAndTheNextStepRuns) {
  Engine engine(EngineOptions{2});
  ProgramOptions options;
  options.streams = 2;
  options.group_ops = OpGrouping::none;
  auto program = engine.compile(gated_probe(), options);
  const Tensor x = test::random_tensor({4, 3}, 2);
  probe_fails = true;
  try {
    wait(program->run_async({x}));
    ADD_FAILURE() << "the step did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    const std::string what = e.what();
    EXPECT_NE(what.find("op 'test_probe %"), std::string::npos) << what;
    EXPECT_NE(what.find("failed in step 1, micro-batch 0: the probe's kernel was told to fail"), std::string::npos) << what;
  }
  probe_fails = false;
  for (int s = 0; s < 2; ++s) EXPECT_TRUE(same(wait(program->run_async({x})).outputs[0], kernels::mul(x, 2.0)));
}

TEST(Streams, AStreamCountOutOfRangeIsRefused) {
  Engine engine(EngineOptions{1});
  for (int streams : {-1, 65}) {
    ProgramOptions options;
    options.streams = streams;
    try {
      engine.compile(gated_probe(), options);
      ADD_FAILURE() << streams << " streams were accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("streams must be between 0 (kernels run in the op actors) and 64, got " +
                                           std::to_string(streams)),
                std::string::npos)
          << e.what();
    }
  }
}
