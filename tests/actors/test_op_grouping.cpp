// Lowering's grouping of graph nodes into shared actors (actors/src/actor_graph.hpp): a cheap node
// joins the actor of the node before it when it waits for nothing new there, products keep actors
// of their own unless one micro-batch is in flight, a node that reads an earlier actor starts its own; grouped programs give the ungrouped bits, forward and
// backward, with micro-batches, planned memory and several threads; a grouped act lets go of an
// input once it is done with it; errors and traces name the grouped op itself.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>

#include "actor_graph.hpp"
#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::actors::ActorGraph;
using troupe::actors::ActorSpec;
using troupe::actors::Engine;
using troupe::actors::EngineOptions;
using troupe::actors::Grouping;
using troupe::actors::OpGrouping;
using troupe::actors::ProgramOptions;
using troupe::actors::StepResult;

namespace {

const SymDim kBatch = SymDim::symbol("batch");

// True when a and b hold the same values.
bool same(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && test::values(a) == test::values(b); }

StepResult wait(std::future<StepResult> f) {
  EXPECT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the step did not finish";
  return f.get();
}

// The op names of each op actor's members, in order.
std::vector<std::vector<std::string>> op_actors(const ActorGraph& plan, const Graph& g) {
  std::vector<std::vector<std::string>> out;
  for (const ActorSpec& a : plan.actors) {
    if (a.kind != ActorSpec::Kind::op) continue;
    out.emplace_back();
    for (const auto& m : a.members) out.back().push_back(g.node(m.node).op);
  }
  return out;
}

// x -> Linear -> gelu -> tanh -> Linear -> relu, and a side branch x * 2 read after the products.
struct Mlp : Module {
  Generator gen{4};
  std::shared_ptr<Linear> fc1 = register_module("fc1", std::make_shared<Linear>(16, 32, gen));
  std::shared_ptr<Linear> fc2 = register_module("fc2", std::make_shared<Linear>(32, 16, gen));
  std::vector<Var> operator()(const std::vector<Var>& in) {
    const Var h = tanh(gelu((*fc1)(in[0])));
    const Var y = relu((*fc2)(h));
    return {y + in[0] * 2.0};
  }
};

TEST(OpGrouping, CheapNodesJoinTheActorBeforeThemAndProductsKeepTheirOwn) {
  Mlp mlp;
  const TracedFunction fn = trace([&](const std::vector<Var>& in) { return mlp(in); }, {{"x", {kBatch, 16}}}).for_inference();
  const Graph& g = fn.graph();
  const ActorGraph ungrouped = actors::lower_to_actors(fn, Grouping{false, false});
  EXPECT_EQ(ungrouped.op_count, static_cast<int>(g.nodes().size()));
  for (const auto& a : op_actors(ungrouped, g)) EXPECT_EQ(a.size(), 1u);

  const ActorGraph grouped = actors::lower_to_actors(fn, Grouping{true, false});
  const auto actors = op_actors(grouped, g);
  ASSERT_GE(actors.size(), 2u);
  int products = 0;
  for (const auto& a : actors) {
    // A product is first in its actor; everything after it is cheap.
    for (std::size_t k = 1; k < a.size(); ++k) EXPECT_FALSE(OpRegistry::instance().get(a[k]).counts_arithmetic()) << a[k];
    products += OpRegistry::instance().get(a[0]).counts_arithmetic() ? 1 : 0;
  }
  EXPECT_EQ(products, 2) << "each Linear's product has an actor of its own";
  EXPECT_LT(grouped.op_count, ungrouped.op_count);
  std::size_t nodes = 0;
  for (const auto& a : actors) nodes += a.size();
  EXPECT_EQ(nodes, g.nodes().size()) << "every node runs in exactly one actor";

  // With one micro-batch the second product joins too: the chain up to the relu is one actor; x * 2
  // reads no actor, so it starts one, and the sum reads the relu's actor, which is not upstream
  // of x * 2's.
  const auto chained = op_actors(actors::lower_to_actors(fn, Grouping{true, true}), g);
  ASSERT_EQ(chained.size(), 3u);
  EXPECT_EQ(chained[0], (std::vector<std::string>{"matmul", "add", "gelu", "tanh", "matmul", "add", "relu"}));
  EXPECT_EQ(chained[2], std::vector<std::string>{"add"});
}

TEST(OpGrouping, ANodeReadingAnEarlierActorStartsItsOwn) {
  // b is a product, so it starts an actor; c reads a's actor, which b's came after: joining a's
  // would move c before b in the schedule, and joining b's would make it wait for b.
  Generator gen(2);
  const Tensor w = test::random_tensor({8, 8}, 3);
  const TracedFunction fn = trace(
      [&](const std::vector<Var>& in) {
        const Var a = exp(in[0]);
        const Var b = matmul(in[0], Var(w));
        const Var c = a + 1.0;
        return std::vector<Var>{b, c};
      },
      {{"x", {kBatch, 8}}}).for_inference();
  const auto actors = op_actors(actors::lower_to_actors(fn, Grouping{true, true}), fn.graph());
  ASSERT_EQ(actors.size(), 3u);
  EXPECT_EQ(actors[0], std::vector<std::string>{"exp"});
  EXPECT_EQ(actors[1], std::vector<std::string>{"matmul"});
  EXPECT_EQ(actors[2], std::vector<std::string>{"add_scalar"});
}

TEST(OpGrouping, GroupedProgramsGiveTheUngroupedBits) {
  for (int level : {1, 3}) {
    for (int micro_batches : {1, 2}) {
      SCOPED_TRACE("level " + std::to_string(level) + ", micro-batches " + std::to_string(micro_batches));
      std::map<OpGrouping, StepResult> results;
      for (OpGrouping grouping : {OpGrouping::none, OpGrouping::all}) {
        Generator gen(5);
        GPTBlock block(16, 2, gen, 32);
        const auto loss = [&](const std::vector<Var>& in) {
          const Var y = block(in[0]);
          return std::vector<Var>{mean(y * y), y};
        };
        const TracedFunction fn =
            trace(loss, {{"x", {kBatch, 8, 16}}}).optimized(level).with_gradients().optimized(level);
        Engine engine(EngineOptions{2});
        ProgramOptions options;
        options.micro_batches = micro_batches;
        options.group_ops = grouping;
        options.optimizers = {std::make_shared<SGD>(block.parameters(), kernels::SgdParams{0.1})};
        auto program = engine.compile(fn, options);
        const Tensor x = test::random_tensor({4, 8, 16}, 7);
        for (int step = 0; step < 3; ++step) results[grouping] = wait(program->run_async({x}));
        if (grouping == OpGrouping::all) {
          EXPECT_LT(program->actor_counts().at("op"), static_cast<int>(fn.graph().nodes().size()));
        }
      }
      const StepResult& a = results[OpGrouping::none];
      const StepResult& b = results[OpGrouping::all];
      ASSERT_EQ(a.outputs.size(), b.outputs.size());
      for (std::size_t k = 0; k < a.outputs.size(); ++k) EXPECT_TRUE(same(a.outputs[k], b.outputs[k])) << k;
      ASSERT_EQ(a.gradients.size(), b.gradients.size());
      for (const auto& [name, grad] : a.gradients) EXPECT_TRUE(same(grad, b.gradients.at(name))) << name;
    }
  }
}

TEST(OpGrouping, GroupedInferenceGivesTheUngroupedBits) {
  for (int micro_batches : {1, 2}) {
    SCOPED_TRACE("micro-batches " + std::to_string(micro_batches));
    Generator gen(5);
    GPTBlock block(16, 2, gen, 32);
    const TracedFunction fn =
        trace([&](const std::vector<Var>& in) { return std::vector<Var>{block(in[0])}; }, {{"x", {kBatch, 8, 16}}})
            .for_inference()
            .optimized(3);
    const Tensor x = test::random_tensor({4, 8, 16}, 7);
    std::map<OpGrouping, Tensor> y;
    std::map<OpGrouping, int> actors;
    for (OpGrouping grouping : {OpGrouping::none, OpGrouping::inference}) {
      Engine engine(EngineOptions{2});
      ProgramOptions options;
      options.micro_batches = micro_batches;
      options.group_ops = grouping;
      auto program = engine.compile(fn, options);
      for (int step = 0; step < 2; ++step) y[grouping] = wait(program->run_async({x})).outputs[0];
      actors[grouping] = program->actor_counts().at("op");
    }
    EXPECT_TRUE(same(y[OpGrouping::none], y[OpGrouping::inference]));
    EXPECT_LT(actors[OpGrouping::inference], actors[OpGrouping::none]);
  }
}

TEST(OpGrouping, AGroupedActLetsGoOfAnInputOnceItIsDoneWithIt) {
  // A product's output read by the next actor, a second product and a chain of layer norms: once
  // the product has read it, the norms may take its bytes.
  Generator gen(1);
  Sequential net;
  net.add(std::make_shared<Linear>(64, 1024, gen));
  net.add(std::make_shared<Linear>(1024, 1024, gen));
  for (int k = 0; k < 3; ++k) net.add(std::make_shared<LayerNorm>(1024));
  const TracedFunction fn = trace(
      [&](const std::vector<Var>& in) { return std::vector<Var>{sum(net(in[0]))}; },
      {{"x", {kBatch, 64}}}).for_inference().optimized(3);
  std::map<OpGrouping, std::size_t> planned;
  const Tensor x = test::random_tensor({64, 64}, 2);
  std::map<OpGrouping, double> value;
  for (OpGrouping grouping : {OpGrouping::none, OpGrouping::all}) {
    Engine engine(EngineOptions{1});
    ProgramOptions options;
    options.group_ops = grouping;
    options.micro_batches = 2;  // so that the second product does not join the first's actor
    auto program = engine.compile(fn, options);
    for (int step = 0; step < 2; ++step) value[grouping] = wait(program->run_async({x})).outputs[0].item();
    ASSERT_TRUE(program->memory_report().has_value());
    planned[grouping] = program->memory_report()->planned_bytes;
  }
  EXPECT_EQ(value[OpGrouping::none], value[OpGrouping::all]);
  const std::size_t activation = 32 * 1024 * sizeof(float);  // one micro-batch's
  EXPECT_LE(planned[OpGrouping::all], planned[OpGrouping::none]);
  EXPECT_LT(planned[OpGrouping::all], 4 * activation) << "the first product's output is not held through the act";
}

TEST(OpGrouping, InferenceProgramsAreGroupedByDefaultAndTrainingStepsAreNot) {
  Mlp mlp;
  const auto fn = [&](const std::vector<Var>& in) { return mlp(in); };
  Engine engine(EngineOptions{1});
  const TracedFunction inference = trace(fn, {{"x", {kBatch, 16}}}).for_inference();
  EXPECT_LT(engine.compile(inference, {})->actor_counts().at("op"), static_cast<int>(inference.graph().nodes().size()));
  const TracedFunction training =
      trace([&](const std::vector<Var>& in) { return std::vector<Var>{mean(mlp(in)[0])}; }, {{"x", {kBatch, 16}}})
          .with_gradients();
  EXPECT_EQ(engine.compile(training, {})->actor_counts().at("op"), static_cast<int>(training.graph().nodes().size()));
}

TEST(OpGrouping, AGroupedOpsFailureNamesTheOp) {
  // The embedding reads ids a cheap view makes, so it runs in that view's act.
  Generator gen(3);
  Embedding table(10, 4, gen);
  const TracedFunction fn = trace(
      [&](const std::vector<Var>& in) { return std::vector<Var>{table(transpose(in[0], 0, 1))}; },
      {{"ids", {kBatch, 3}, DType::i64}}).for_inference();
  Engine engine(EngineOptions{1});
  auto program = engine.compile(fn, {});
  ASSERT_EQ(program->actor_counts().at("op"), 1);
  const Tensor ok = Tensor::from_vector<std::int64_t>({1, 2, 3, 4, 0, 1}, {2, 3});
  EXPECT_EQ(wait(program->run_async({ok})).outputs[0].shape(), (Shape{3, 2, 4}));
  const Tensor bad = Tensor::from_vector<std::int64_t>({1, 2, 3, 4, 12, 1}, {2, 3});  // 12 is out of range
  try {
    wait(program->run_async({bad}));
    FAIL() << "an id out of range was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'embedding %"), std::string::npos) << e.what();
  }
}

TEST(OpGrouping, AGroupedOpsKernelTimeShowsOnItsOwnTrack) {
  Mlp mlp;
  const TracedFunction fn = trace([&](const std::vector<Var>& in) { return mlp(in); }, {{"x", {kBatch, 16}}}).for_inference();
  Engine engine(EngineOptions{1});
  auto program = engine.compile(fn, {});
  actors::Tracer& tracer = actors::Tracer::instance();
  tracer.clear();
  tracer.enable(true);
  wait(program->run_async({test::random_tensor({4, 16}, 1)}));
  tracer.enable(false);
  const nlohmann::json trace = nlohmann::json::parse(tracer.chrome_json());
  std::map<std::int64_t, std::string> names;
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") names[e["tid"]] = e["args"].value("name", "");
  std::set<std::string> computing;
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e.value("name", "") == "compute") computing.insert(names[e["tid"]]);
  for (const graph::Node& n : fn.graph().nodes()) {
    const std::string name = n.op + " %" + std::to_string(n.outputs[0]);
    EXPECT_TRUE(computing.count(name)) << name << " has no compute slice on a track of its name";
  }
}

}  // namespace
