// Data parallelism's gradient compression (GradCompression, actors/src/grad_compression.hpp): the
// spec's text, a bucket's compressed all-reduce on two in-process ranks (bf16; PowerSGD's factors,
// exact on a low-rank gradient, its error feedback, warm-up and bytes), and two ranks training with
// compression: the replicas stay bit-identical and the loss follows the uncompressed one.
#include <gtest/gtest.h>

#include <thread>

#include "actors/tiny_gpt.hpp"
#include "grad_compression.hpp"
#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/matmul.hpp"
#include "troupe/transport/inprocess.hpp"

using namespace troupe;
using troupe::actors::BucketCompressor;
using troupe::actors::BucketEntry;
using troupe::actors::GradCompression;
using troupe::actors::StepResult;

namespace {

// Runs body(rank, group) on two in-process ranks at once.
template <class Body>
void on_two_ranks(Body body) {
  auto world = transport::make_inprocess_world(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      transport::ProcessGroup g(*world[static_cast<std::size_t>(r)]);
      body(r, g);
    });
  for (auto& t : threads) t.join();
}

bool same(const Tensor& a, const Tensor& b) { return test::values(a) == test::values(b); }

}  // namespace

TEST(GradCompression, ParsesTheSpecsAndRefusesOthersByName) {
  EXPECT_EQ(GradCompression::parse("none").kind, GradCompression::Kind::none);
  EXPECT_EQ(GradCompression::parse("bf16").kind, GradCompression::Kind::bf16);
  const GradCompression p = GradCompression::parse("powersgd:4");
  EXPECT_EQ(p.kind, GradCompression::Kind::powersgd);
  EXPECT_EQ(p.rank, 4);
  EXPECT_EQ(p.str(), "powersgd:4");
  const GradCompression late = GradCompression::parse("powersgd:2:100");
  EXPECT_EQ(late.rank, 2);
  EXPECT_EQ(late.warmup_steps, 100);
  EXPECT_EQ(late.str(), "powersgd:2:100");
  EXPECT_EQ(GradCompression::parse("powersgd:2:10").str(), "powersgd:2");
  EXPECT_EQ(GradCompression::parse("auto").kind, GradCompression::Kind::automatic);
  EXPECT_EQ(GradCompression::parse("auto").str(), "auto");
  for (const char* bad : {"", "zip", "powersgd", "powersgd:0", "powersgd:65", "powersgd:-1", "powersgd:2x", "BF16", "auto:4", "powersgd:4:", "powersgd:4:x",
                          "powersgd:4:-1", "powersgd:4:10000000"}) {
    try {
      GradCompression::parse(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("is not one of none, bf16, powersgd:R (R from 1 to 64; powersgd:R:W sends the first W steps whole"), std::string::npos)
          << e.what();
    }
  }
}

// bf16: each rank's bucket rounded once, the sum of the two in f32 rounded once, the mean taken in
// f32; every rank gets the same bits, half the bytes.
TEST(GradCompression, Bf16SendsHalfTheBytesAndEveryRankGetsTheSameResult) {
  const std::vector<BucketEntry> entries{{0, 0, {10, 10}}, {1, 100, {37}}};
  std::vector<Tensor> got(2);
  std::vector<std::uint64_t> bytes(2);
  on_two_ranks([&](int r, transport::ProcessGroup& g) {
    BucketCompressor c(entries, 137, GradCompression::parse("bf16"));
    got[r] = test::random_tensor({137}, 10 + r);
    c.all_reduce(g, got[r], transport::ReduceOp::mean);
    bytes[r] = g.bytes_sent();
  });
  EXPECT_TRUE(same(got[0], got[1]));
  EXPECT_EQ(bytes[0], 137u * 2);
  const Tensor a = test::random_tensor({137}, 10).to(DType::bf16).to(DType::f32);
  const Tensor b = test::random_tensor({137}, 11).to(DType::bf16).to(DType::f32);
  const Tensor expected = kernels::mul(kernels::add(a, b).to(DType::bf16).to(DType::f32), 0.5);
  EXPECT_TRUE(same(got[0], expected));
}

// PowerSGD rank 2 on a bucket of a rank-1 matrix gradient (the same u on both ranks, v differing),
// a small matrix and a vector: after the warm-up the rank-1 mean comes back exactly (up to f32
// rounding), the rest exactly as a plain all-reduce; every rank the same bits; the factors are
// 2 (n + m) values instead of n m.
TEST(GradCompression, PowerSgdReducesALowRankGradientAndSendsItsFactors) {
  const std::int64_t n = 48, m = 40;
  const std::vector<BucketEntry> entries{{0, 0, {n, m}}, {1, n * m, {3, 3}}, {2, n * m + 9, {5}}};
  const std::int64_t numel = n * m + 14;
  GradCompression how = GradCompression::parse("powersgd:2");
  how.warmup_steps = 1;
  std::vector<Tensor> got(2), warm(2);
  std::vector<std::uint64_t> bytes(2), warm_bytes(2);
  const Tensor u = test::random_tensor({n, 1}, 20);
  const auto bucket = [&](int r) {
    Tensor flat = test::random_tensor({numel}, 30 + r);
    flat.slice(0, 0, n * m).view({n, m}).copy_from(kernels::matmul(u, test::random_tensor({1, m}, 40 + r)));
    return flat;
  };
  on_two_ranks([&](int r, transport::ProcessGroup& g) {
    BucketCompressor c(entries, numel, how);
    warm[r] = bucket(r);
    c.all_reduce(g, warm[r], transport::ReduceOp::mean);  // the warm-up: whole
    warm_bytes[r] = g.bytes_sent();
    got[r] = bucket(r);
    c.all_reduce(g, got[r], transport::ReduceOp::mean);
    bytes[r] = g.bytes_sent() - warm_bytes[r];
  });
  const Tensor mean = kernels::mul(kernels::add(bucket(0), bucket(1)), 0.5);
  EXPECT_TRUE(same(got[0], got[1])) << "the replicas differ";
  EXPECT_TRUE(same(warm[0], warm[1]));
  EXPECT_LE(test::scaled_max_error(warm[0], mean), 1e-7) << "the warm-up step is a plain all-reduce";
  EXPECT_LE(test::scaled_max_error(got[0].slice(0, 0, n * m), mean.slice(0, 0, n * m)), 1e-5) << "a rank-1 mean is exact";
  EXPECT_LE(test::scaled_max_error(got[0].slice(0, n * m, numel), mean.slice(0, n * m, numel)), 1e-7) << "the rest goes whole";
  EXPECT_EQ(warm_bytes[0], static_cast<std::uint64_t>(numel) * 4);
  EXPECT_EQ(bytes[0], static_cast<std::uint64_t>(2 * (n + m) + 14) * 4);
}

// What the factors miss is not lost: it is added to the next step's gradient. Rank 1 sends one
// direction of a rank-2 gradient at a time; over steps of the same gradient the sum of what
// arrived approaches the sum of what was sent (the difference is the error kept, which stays
// bounded), where without the feedback the second direction would never arrive.
TEST(GradCompression, PowerSgdsErrorFeedbackCarriesWhatTheFactorsMissed) {
  const std::int64_t n = 32, m = 32;
  GradCompression how = GradCompression::parse("powersgd:1");
  how.warmup_steps = 0;
  std::vector<double> first_error(2), late_error(2);
  on_two_ranks([&](int r, transport::ProcessGroup& g) {
    BucketCompressor c({{0, 0, {n, m}}}, n * m, how);
    // The same on both ranks (the mean is itself): two directions of similar weight.
    const Tensor grad = kernels::add(kernels::matmul(test::random_tensor({n, 1}, 50), test::random_tensor({1, m}, 51)),
                                     kernels::matmul(test::random_tensor({n, 1}, 52), test::random_tensor({1, m}, 53)))
                            .view({n * m});
    Tensor sent = Tensor::zeros({n * m}), arrived = Tensor::zeros({n * m});
    for (int step = 1; step <= 40; ++step) {
      const Tensor flat = grad.clone();
      c.all_reduce(g, flat, transport::ReduceOp::mean);
      sent = kernels::add(sent, grad);
      arrived = kernels::add(arrived, flat);
      const double error = test::scaled_max_error(arrived, sent);
      if (step == 1) first_error[r] = error;
      if (step == 40) late_error[r] = error;
    }
  });
  EXPECT_GT(first_error[0], 0.2) << "one rank-1 step cannot carry a rank-2 gradient";
  EXPECT_LT(late_error[0], 0.1 * first_error[0]) << "the error feedback did not deliver what was missed";
}

// Two ranks training the tiny GPT with compressed gradients stay bit-identical (every rank
// decompresses the same reduced factors), and end near the uncompressed run.
TEST(GradCompression, CompressedReplicasStayIdenticalAndTrainLikeUncompressed) {
  const auto train = [](const std::string& spec) {
    auto world = transport::make_inprocess_world(2);
    std::vector<std::vector<double>> losses(2);
    std::vector<std::map<std::string, Tensor>> params(2);
    actors::Engine engine(actors::EngineOptions{2});
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        Generator gen(3);
        test::TinyGpt model(gen);
        actors::ProgramOptions po;
        po.optimizers = {std::make_shared<graph::AdamW>(model.parameters(), test::tiny_gpt_adamw())};
        po.data_parallel.communicator = std::make_shared<transport::Communicator>(
            std::move(world[static_cast<std::size_t>(r)]), "allreduce", 0, 256);
        po.data_parallel.fusion_mb = 0.004;
        po.data_parallel.compression = GradCompression::parse(spec);
        po.data_parallel.compression.warmup_steps = 2;
        auto program = engine.compile(model.step(), po);
        for (int s = 0; s < 8; ++s) {
          const Tensor ids = test::tiny_gpt_tokens(8, 100 + s), targets = test::tiny_gpt_tokens(8, 200 + s);
          const StepResult res = program->run({ids.slice(0, 4 * r, 4 * r + 4).contiguous(),
                                               targets.slice(0, 4 * r, 4 * r + 4).contiguous()});
          losses[static_cast<std::size_t>(r)].push_back(res.outputs[0].item());
        }
        for (const auto& [name, p] : model.named_parameters()) params[static_cast<std::size_t>(r)][name] = p.tensor().clone();
      });
    for (auto& t : threads) t.join();
    return std::pair{losses, params};
  };
  const auto [plain_losses, plain_params] = train("none");
  for (const char* spec : {"bf16", "powersgd:2"}) {
    SCOPED_TRACE(spec);
    const auto [losses, params] = train(spec);
    EXPECT_EQ(losses[0], losses[1]);
    for (const auto& [name, p] : params[0]) EXPECT_TRUE(same(p, params[1].at(name))) << name << " differs between the replicas";
    for (std::size_t s = 0; s < 8; ++s) EXPECT_NEAR(losses[0][s], plain_losses[0][s], 0.05 * plain_losses[0][s]) << "step " << s;
  }
}

TEST(GradCompression, CompressionWithZeroIsRefused) {
  auto world = transport::make_inprocess_world(1);
  Generator gen(3);
  test::TinyGpt model(gen);
  actors::Engine engine(actors::EngineOptions{1});
  actors::ProgramOptions po;
  po.optimizers = {std::make_shared<graph::AdamW>(model.parameters(), test::tiny_gpt_adamw())};
  po.data_parallel.communicator = std::make_shared<transport::Communicator>(std::move(world[0]), "allreduce");
  po.data_parallel.zero = true;
  po.data_parallel.zero_group = po.data_parallel.communicator;
  po.data_parallel.compression = GradCompression::parse("bf16");
  try {
    engine.compile(model.step(), po);
    ADD_FAILURE() << "compression with ZeRO-1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gradient compression (bf16) needs ZeRO-1 off"), std::string::npos) << e.what();
  }
}

// Auto's model: collectives one after another, each starting when its bucket is full and the
// one before is done; what runs past backward's end is exposed, and their CPU time is lost too.
TEST(GradCompression, AutoCompressesOnlyWhatWouldCostTheStep) {
  using actors::TravelCost;
  EXPECT_DOUBLE_EQ(actors::exposed_ms({10, 0}, {5, 5}), 5);   // bucket 0 hidden, bucket 1 after backward
  EXPECT_DOUBLE_EQ(actors::exposed_ms({10, 0}, {20, 5}), 15);  // bucket 0 runs 10 ms past, bucket 1 queues behind it
  EXPECT_DOUBLE_EQ(actors::exposed_ms({50, 40}, {5, 5}), 0);
  EXPECT_DOUBLE_EQ(actors::step_cost_ms({50, 0}, {{5, 1}, {5, 2}}), 8);
  const auto times = [](std::vector<double> a, std::vector<double> b) {  // options without CPU time
    std::vector<std::vector<TravelCost>> out(2);
    for (double ms : a) out[0].push_back({ms, 0});
    for (double ms : b) out[1].push_back({ms, 0});
    return out;
  };
  // Bucket 0 has a 30 ms window, wide enough for its whole collective: only the last bucket is compressed.
  EXPECT_EQ(actors::least_compression({30, 0}, times({20, 12, 6}, {8, 5, 3}), 0.1, 0), (std::vector<std::size_t>{0, 2}));
  // A 10 ms window is not: bucket 0 would delay bucket 1, so both are compressed.
  EXPECT_EQ(actors::least_compression({10, 0}, times({20, 12, 6}, {8, 5, 3}), 0.1, 0), (std::vector<std::size_t>{2, 2}));
  // Bf16 is enough when it hides as much as PowerSGD would.
  EXPECT_EQ(actors::least_compression({15, 0}, times({20, 12, 6}, {1, 0.95}), 0.1, 0), (std::vector<std::size_t>{1, 0}));
  // A gain under the threshold is not worth compressing for.
  EXPECT_EQ(actors::least_compression({100, 0}, times({20, 12, 6}, {0.1, 0.08, 0.07}), 0.2, 0), (std::vector<std::size_t>{0, 0}));
  // A hidden collective that takes the cores 8 ms is compressed all the same.
  EXPECT_EQ(actors::least_compression({100, 0}, {{{20, 8}, {12, 4}, {6, 1}}, {{0.1, 0}}}, 0.2, 0), (std::vector<std::size_t>{2, 0}));
  // With 1 ms of slack the weaker option costing 0.5 ms more is taken instead.
  EXPECT_EQ(actors::least_compression({10, 0}, times({20, 12, 6}, {8, 3.5, 3}), 0.1, 1), (std::vector<std::size_t>{2, 1}));
  EXPECT_EQ(actors::least_compression({10, 0}, times({20, 12, 6}, {8, 3.5, 3}), 0.1, 0.4), (std::vector<std::size_t>{2, 2}));
}
