// The planner's model of a pipelined step (troupe/plan/pipeline_cost.hpp): the step the stages
// make, and one stage's share measured from its traced step.
#include <gtest/gtest.h>

#include "actors/tiny_gpt.hpp"
#include "troupe/plan/pipeline_cost.hpp"
#include "troupe/plan/propagation.hpp"

using namespace troupe;

TEST(PipelineCost, TheSlowestStageSetsThePaceOfEveryMicroBatch) {
  plan::StageCost fast, slow;
  fast.micro_batch.compute = 0.5;
  fast.transfer = 0.1;
  fast.optimizer = 0.3;
  slow.micro_batch.compute = 0.9;
  slow.micro_batch.communication = 0.1;
  slow.transfer = 0.1;
  slow.optimizer = 0.2;
  slow.gradient_sync = 0.05;
  const plan::PipelineCost p = plan::pipeline_cost({fast, slow}, 4);
  // 4 + 2 - 1 slots of the slow stage's 1.1 s, then the slowest update (0.3 > 0.25).
  EXPECT_DOUBLE_EQ(p.step, 5 * 1.1 + 0.3);
  EXPECT_DOUBLE_EQ(p.bubble, ((1 - 4 * 0.5 / 5.5) + (1 - 4 * 1.0 / 5.5)) / 2);
  // Balanced stages with nothing but compute idle (p - 1) / (m + p - 1) of it.
  plan::StageCost even;
  even.micro_batch.compute = 1;
  EXPECT_DOUBLE_EQ(plan::pipeline_cost({even, even, even}, 8).bubble, 2.0 / 10);
  EXPECT_THROW(plan::pipeline_cost({}, 4), Error);
}

// The tiny GPT's last stage (its second block, the head and the loss) at micro-batches of 2 rows:
// its sends are the received input's gradient ([2, 8, 16] f32) at the pp link, its replicas'
// all-reduce its gradients at the dp link, its step holds its gradients and the micro-batches in
// flight's activations.
TEST(PipelineCost, AStagesShareComesFromItsTracedStep) {
  Generator gen(7);
  test::TinyGpt model(gen);
  const graph::SymDim b = graph::SymDim::symbol("batch");
  const graph::TracedFunction step =
      plan::trace_stage_steps(model.stages(), {1, 1}, {{"ids", {b, 8}, DType::i64}, {"targets", {b, 8}, DType::i64}})[1];
  const graph::Mesh mesh{{{"tp", 1}}};
  const graph::SymBindings rows{{"batch", 2}};
  const graph::GraphPlacement placed = plan::propagate_sharding(step.graph(), mesh, {}, {}, rows);
  plan::CostModel cost;
  cost.gflops = 1;
  cost.links["pp"] = {0.001, 10};  // 1 MB/s, 10 us
  cost.links["dp"] = {0.002, 30};
  const plan::StageCost one = plan::stage_cost(step, placed, rows, cost, 1, 1, 8);
  EXPECT_GT(one.micro_batch.compute, 0);
  EXPECT_DOUBLE_EQ(one.transfer, 10e-6 + 2 * 8 * 16 * 4 / 1e6);
  EXPECT_EQ(one.gradient_sync, 0);
  EXPECT_GT(one.memory.activations, 0);
  EXPECT_GT(one.optimizer, 0);
  const plan::StageCost replicated = plan::stage_cost(step, placed, rows, cost, 2, 3, 8);
  EXPECT_DOUBLE_EQ(replicated.gradient_sync,
                   30e-6 + graph::collective_bytes(graph::Collective::all_reduce, one.memory.gradients, 2) / 2e6);
  EXPECT_DOUBLE_EQ(replicated.step_bytes(), one.memory.gradients + 3 * one.memory.activations);
  EXPECT_DOUBLE_EQ(replicated.peak_bytes(), one.memory.parameters + one.memory.optimizer_state + replicated.step_bytes());
}
