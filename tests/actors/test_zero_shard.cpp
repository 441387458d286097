// ZeRO-1's shard alone (actors/src/zero_shard.hpp): its all-gather of the updated parameters runs
// after the step, overlapping what comes next. A reader of a parameter is told when its bucket is
// written (the actors turn that into a message); when a peer never joins the all-gather, the
// waiting reader and settle() get an error naming the step and the silent rank within the
// transport's timeout, and the shard can still be destroyed.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "expect_error.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"
#include "zero_shard.hpp"

namespace troupe::actors {
namespace {

// One parameter of 4 elements in one bucket, shared by 2 ranks (2 elements each).
std::shared_ptr<const BucketLayout> one_bucket() {
  auto plan = std::make_shared<BucketLayout>();
  plan->buckets = {{BucketEntry{0, 0, {4}}}};
  plan->bucket_of_sink = {0};
  plan->numel = {4};
  return plan;
}

// Waits, as this test's thread may, until `shard` says parameter `index` is written; rethrows its
// all-gather's failure.
void wait_gathered(ZeroShard& shard, int index) {
  std::promise<void> written;
  std::future<void> over = written.get_future();
  if (shard.when_gathered(index, [&](std::exception_ptr e) { e ? written.set_exception(e) : written.set_value(); })) return;
  over.get();
}

TEST(ZeroShard, AReaderIsToldWhenItsBucketIsWrittenAndASilentPeerIsNamed) {
  auto world = transport::make_inprocess_world(2);
  for (auto& t : world) t->timeout = std::chrono::milliseconds(200);
  std::vector<std::shared_ptr<transport::Communicator>> groups;
  for (auto& t : world) groups.push_back(std::make_shared<transport::Communicator>(std::move(t), "zero"));
  std::vector<Tensor> weights{Tensor::from_vector<float>({1, 2, 3, 4}, {4}), Tensor::from_vector<float>({1, 2, 3, 4}, {4})};
  std::vector<std::unique_ptr<ZeroShard>> shards;
  for (int r = 0; r < 2; ++r) {
    const graph::Var w = graph::Var::leaf(weights[static_cast<std::size_t>(r)], "w");
    kernels::SgdParams plain;
    plain.lr = 1.0;
    auto sgd = std::make_shared<graph::SGD>(std::vector<graph::Var>{w}, plain);
    shards.push_back(std::make_unique<ZeroShard>(one_bucket(), std::vector<Tensor>{w.tensor()}, std::vector<std::string>{"w"},
                                                 std::vector<int>{0}, sgd, groups[static_cast<std::size_t>(r)]));
  }
  const std::map<std::string, Tensor> gradients{{"w", Tensor::from_vector<float>({1, 1, 1, 1}, {4})}};
  // Both ranks step: each updates its half, and the all-gather gives both the whole update.
  std::thread other([&] { shards[1]->step(gradients); });
  shards[0]->step(gradients);
  wait_gathered(*shards[0], 0);
  other.join();
  shards[1]->settle();
  for (const Tensor& w : weights) EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_TRUE(shards[0]->when_gathered(7, [](std::exception_ptr) { ADD_FAILURE() << "parameter 7 is not ZeRO-1's"; }));
  EXPECT_TRUE(shards[0]->when_settled([](std::exception_ptr) { ADD_FAILURE() << "the all-gather is over"; }));
  // Rank 1 stops stepping: rank 0's all-gather hears nothing, and whoever waits is told.
  shards[0]->step(gradients);
  test::expect_error_mentions([&] { wait_gathered(*shards[0], 0); },
                              {"ZeRO-1: the all-gather of the parameters updated in step 2 failed", "rank 1 sent nothing within 200 ms"});
  test::expect_error_mentions([&] { shards[0]->settle(); }, {"updated in step 2 failed"});
  test::expect_error_mentions([&] { shards[0]->step(gradients); }, {"updated in step 2 failed"});
}

}  // namespace
}  // namespace troupe::actors
