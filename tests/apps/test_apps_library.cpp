// The pieces the applications share: corpus split and window sampling, checkpoints (round trip,
// the "latest" pointer, pruning, damage), gradient statistics, progress output, GRAD_MODE, the
// micro-batch count the flags resolve to, the shapes and errors of the two models, and the
// training run both apps share (its parts called in order, saves, resume).
#include <gtest/gtest.h>

#include <cmath>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/app_runner.hpp"
#include "troupe/apps/cli.hpp"
#include "troupe/apps/corpus.hpp"
#include "troupe/apps/grad_mode.hpp"
#include "troupe/apps/metrics.hpp"
#include "troupe/apps/progress.hpp"
#include "troupe/apps/sr_data.hpp"
#include "troupe/actors/gradient_stats.hpp"
#include "troupe/apps/run_flags.hpp"
#include "troupe/apps/training_run.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/checkpoint.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/models/sr_lite.hpp"

using namespace troupe;
namespace fs = std::filesystem;

TEST(Corpus, SplitAndWindowsAreDeterministicAndResumable) {
  const std::string text = apps::generated_corpus(5000);
  EXPECT_EQ(text.size(), 5000u);
  EXPECT_EQ(apps::generated_corpus(5000), text);
  const auto [train, val] = apps::split_corpus(text, 0.1, 16, "test");
  EXPECT_EQ(train.size() + val.size(), text.size());
  EXPECT_EQ(val.size(), 500u);
  EXPECT_EQ(train + val, text);
  apps::WindowSampler a(train, 16, 3, 7, "train"), b(train, 16, 3, 7, "train");
  const auto [ids, targets] = a.next();
  EXPECT_EQ(ids.shape(), (Shape{3, 16}));
  const auto x = ids.to_vector<std::int64_t>(), y = targets.to_vector<std::int64_t>();
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(y[r * 16 + t], x[r * 16 + t + 1]);  // targets are the next bytes
  const auto second = a.next().first.to_vector<std::int64_t>();
  b.set_position(a.position() - 3);  // resume just before the second batch
  EXPECT_EQ(b.next().first.to_vector<std::int64_t>(), second);
  EXPECT_THROW(apps::WindowSampler(std::string(10, 'a'), 16, 1, 1, "tiny"), Error);
  EXPECT_THROW(apps::split_corpus(std::string(20, 'a'), 0.1, 16, "test"), Error);
  EXPECT_THROW(apps::split_corpus(text, 1.5, 16, "test"), Error);
}

TEST(Corpus, DefaultCorpusIsFoundOrGenerated) {
  const apps::Corpus c = apps::load_corpus("");
  EXPECT_GT(c.bytes.size(), 10000u);
  EXPECT_FALSE(c.source.empty());
  if (fs::is_directory(apps::kDefaultCorpusDir)) {
    EXPECT_NE(c.source.find(apps::kDefaultCorpusDir), std::string::npos);
  }
}

TEST(Checkpoint, RoundTripLatestPointerPruningAndDamage) {
  const std::string dir = test::fresh_dir("checkpoint");
  models::CheckpointState st;
  st.ints["step"] = 1;
  st.strings["app"] = "test";
  const std::map<std::string, Tensor> model{{"w", Tensor::full({2, 2}, 1.5)}}, opt{{"w.m", Tensor::full({2, 2}, 0.25)}};
  for (int step = 1; step <= 3; ++step) {
    st.ints["step"] = step;
    models::save_checkpoint(dir, step, model, opt, st, /*keep=*/2);
  }
  models::Checkpoint c = models::load_checkpoint(dir);
  EXPECT_EQ(c.state.int_at("step"), 3);
  EXPECT_EQ(c.state.string_at("app"), "test");
  EXPECT_EQ(c.model.at("w").to_vector<float>(), std::vector<float>(4, 1.5f));
  EXPECT_EQ(c.optimizer.at("w.m").to_vector<float>(), std::vector<float>(4, 0.25f));
  EXPECT_FALSE(fs::exists(dir + "/step-00000001"));  // pruned: only the two newest stay
  EXPECT_TRUE(fs::exists(dir + "/step-00000002"));
  EXPECT_THROW(c.state.int_at("missing"), Error);
  EXPECT_NO_THROW(models::load_checkpoint(dir, "test"));
  EXPECT_THROW(models::load_checkpoint(dir, "troupe-gpt"), Error);  // written by another application
  // A save that died half-way leaves a .tmp folder; "latest" still names the complete checkpoint.
  fs::create_directories(dir + "/step-00000004.tmp");
  std::ofstream(dir + "/step-00000004.tmp/model.safetensors") << "partial";
  EXPECT_EQ(models::load_checkpoint(dir).state.int_at("step"), 3);
  // Damage is reported with the folder's name.
  std::ofstream(dir + "/step-00000003/state.json") << "{ not json";
  try {
    models::load_checkpoint(dir);
    FAIL() << "a damaged state.json was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step-00000003"), std::string::npos) << e.what();
  }
  EXPECT_THROW(models::load_checkpoint(test::fresh_dir("no_checkpoint")), Error);
}

// Retention never deletes the save just written (which `latest` names), and counts by step number:
// before, it sorted by name, so a run resumed from an earlier step pruned its own save, and past
// 8 digits "step-100000000" sorted first and was deleted.
TEST(Checkpoint, RetentionKeepsTheSaveJustWrittenAndSortsByStep) {
  const std::string dir = test::fresh_dir("retention");
  models::CheckpointState st;
  st.strings["app"] = "test";
  const std::map<std::string, Tensor> model{{"w", Tensor::full({1}, 1.0)}}, opt{{"w.m", Tensor::full({1}, 0.0)}};
  for (std::int64_t step : {2, 4, 1}) {
    st.ints["step"] = step;
    models::save_checkpoint(dir, step, model, opt, st, /*keep=*/2);
  }
  EXPECT_EQ(models::load_checkpoint(dir).state.int_at("step"), 1);
  EXPECT_TRUE(fs::exists(dir + "/step-00000001"));
  EXPECT_TRUE(fs::exists(dir + "/step-00000004"));
  EXPECT_FALSE(fs::exists(dir + "/step-00000002"));
  for (std::int64_t step : {99999998, 99999999, 100000000}) {
    st.ints["step"] = step;
    models::save_checkpoint(dir, step, model, opt, st, /*keep=*/2);
  }
  EXPECT_EQ(models::load_checkpoint(dir).state.int_at("step"), 100000000);
  EXPECT_TRUE(fs::exists(dir + "/step-99999999"));
  EXPECT_FALSE(fs::exists(dir + "/step-99999998"));
}

// A diverged state (NaN or infinite weights or moments) is never saved: the save fails naming the
// tensor and the step, and the previous save stays what latest names.
TEST(Checkpoint, NonFiniteStateIsNeverSaved) {
  const std::string dir = test::fresh_dir("nonfinite");
  models::CheckpointState st;
  st.strings["app"] = "test";
  st.ints["step"] = 1;
  const std::map<std::string, Tensor> opt{{"w.m", Tensor::full({2}, 0.0)}};
  models::save_checkpoint(dir, 1, {{"w", Tensor::full({2}, 1.0)}}, opt, st);
  for (double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
    std::vector<float> w = {0.5f, static_cast<float>(bad)};
    try {
      models::save_checkpoint(dir, 2, {{"w", Tensor::from_vector(w, {2})}}, opt, st);
      ADD_FAILURE() << "a model holding " << bad << " was saved";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("step 2: the model tensor 'w' holds"), std::string::npos) << e.what();
    }
  }
  try {
    models::save_checkpoint(dir, 2, {{"w", Tensor::full({2}, 1.0)}}, {{"w.v", Tensor::full({2}, std::nan(""))}}, st);
    ADD_FAILURE() << "an optimizer state holding NaN was saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the optimizer tensor 'w.v'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir + "/step-00000002"));
  EXPECT_EQ(models::load_checkpoint(dir).state.int_at("step"), 1);
}

// A save folder is checked before training: one holding a run (unless it is the one resumed), a
// file, a path that cannot be created (a regular file as parent fails for root too).
TEST(Checkpoint, SaveFolderIsCheckedBeforeTraining) {
  const std::string dir = test::fresh_dir("save_folder");
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NO_THROW(models::prepare_save_folder(dir + "/new/ck", ""));
  EXPECT_TRUE(fs::is_directory(dir + "/new/ck"));
  EXPECT_TRUE(fs::is_empty(dir + "/new/ck"));  // the write probe is gone
  models::CheckpointState st;
  st.ints["step"] = 1;
  models::save_checkpoint(dir + "/run", 1, {{"w", Tensor::full({1}, 1.0)}}, {}, st);
  EXPECT_NE(message([&] { models::prepare_save_folder(dir + "/run", ""); }).find("already holds a run; continue it with --resume"),
            std::string::npos);
  EXPECT_NE(message([&] { models::prepare_save_folder(dir + "/run", dir + "/new/ck"); }).find("already holds another run"),
            std::string::npos);
  EXPECT_NO_THROW(models::prepare_save_folder(dir + "/run", dir + "/./run"));
  fs::remove(dir + "/run/latest");
  EXPECT_THROW(models::prepare_save_folder(dir + "/run", ""), Error);  // step folders alone are a run too
  std::ofstream(dir + "/file") << "x";
  EXPECT_NE(message([&] { models::prepare_save_folder(dir + "/file", ""); }).find("is a file"), std::string::npos);
  EXPECT_NE(message([&] { models::prepare_save_folder(dir + "/file/ck", ""); }).find("cannot create the checkpoint folder"),
            std::string::npos);
}

// `latest` that is empty, names no step folder, or names a missing one: an error naming it.
// Integers in state.json must be integers of 64 bits: nlohmann would turn 1e300 or 2^64 - 1 into
// an int64 without a check.
TEST(Checkpoint, StateIntegersOutsideSixtyFourBitsAreRefused) {
  const std::string dir = test::fresh_dir("state_ints");
  models::CheckpointState st;
  st.ints["step"] = 3;
  models::save_checkpoint(dir, 3, {{"w", Tensor::full({1}, 1.0)}}, {}, st);
  for (const auto& [bad, shown] : std::vector<std::pair<std::string, std::string>>{
           {"1e300", "1e+300"}, {"18446744073709551615", "18446744073709551615"}, {"2.5", "2.5"}, {"\"7\"", "\"7\""}}) {
    std::ofstream(dir + "/step-00000003/state.json") << R"({"ints": {"step": )" << bad << R"(}, "strings": {}})";
    try {
      models::load_checkpoint(dir);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'step' is " + shown + ", not an integer of 64 bits"), std::string::npos)
          << e.what();
    }
  }
  std::ofstream(dir + "/step-00000003/state.json") << R"({"ints": {"step": -4}, "strings": {}})";
  EXPECT_EQ(models::load_checkpoint(dir).state.int_at("step"), -4);
}

TEST(Checkpoint, DamagedLatestIsNamed) {
  const std::string dir = test::fresh_dir("latest");
  models::CheckpointState st;
  models::save_checkpoint(dir, 3, {{"w", Tensor::full({1}, 1.0)}}, {}, st);
  auto message = [&] {
    try {
      models::load_checkpoint(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const auto& [content, expect] : std::vector<std::pair<std::string, std::string>>{
           {"", "latest' is empty"},
           {"../../etc\n", "should name a step-<N> folder but holds '../../etc'"},
           {"step-00000009\n", "names 'step-00000009', which is missing"},
           {"\x1b[2Jstep", "holds '\\x1b[2Jstep'"}}) {
    std::ofstream(dir + "/latest") << content;
    EXPECT_NE(message().find(expect), std::string::npos) << message();
  }
}

// Flag ranges: a message in the user's terms for values outside, NaN included; text that is not a
// number is left to CLI11's conversion error.
TEST(Cli, RangesSayWhatTheFlagAccepts) {
  const CLI::Validator port = apps::in_range(0, 65535, "0 = a free port"), lr = apps::open_range(0, 10);
  EXPECT_EQ(port("70000"), "must be from 0 to 65535 (0 = a free port), got 70000");
  EXPECT_EQ(port("0"), "");
  EXPECT_EQ(port("65535"), "");
  EXPECT_EQ(port("-1"), "must be from 0 to 65535 (0 = a free port), got -1");
  EXPECT_EQ(port("many"), "");
  EXPECT_EQ(lr("0"), "must be between 0 and 10 (both excluded), got 0");
  EXPECT_EQ(lr("nan"), "must be between 0 and 10 (both excluded), got nan");
  EXPECT_EQ(lr("inf"), "must be between 0 and 10 (both excluded), got inf");
  EXPECT_EQ(lr("3e-4"), "");
}

// Communication that no compute hides above 15% of a step is worth a warning, once, with the share
// and what to try; below it, or with none, the loop says nothing.
TEST(TrainingLoop, WarnsOnceWhenCommunicationIsExposed) {
  EXPECT_FALSE(apps::communication_advice(1.0, 10.0).has_value());
  EXPECT_FALSE(apps::communication_advice(0.0, 0.0).has_value());
  const std::optional<std::string> advice = apps::communication_advice(4.6, 20.0);
  ASSERT_TRUE(advice.has_value());
  for (const char* word : {"23% of a step", "4.6 of 20.0 ms", "--comm-fusion-mb", "GRAD_MODE=standard"})
    EXPECT_NE(advice->find(word), std::string::npos) << *advice;
  const auto warnings = [](double exposed_ms, std::int64_t steps) {
    apps::LoopOptions o;
    o.steps = steps;
    o.log_every = 1000;
    o.app = "toy";
    apps::LoopHooks hooks;
    hooks.step = [exposed_ms] {
      actors::StepReport r;
      r.loss = 1;
      r.comm_ms = r.exposed_comm_ms = exposed_ms;  // far more than the step's own time when not 0
      return r;
    };
    hooks.evaluate = [] { return 0.0; };
    testing::internal::CaptureStderr();
    testing::internal::CaptureStdout();
    apps::run_training_loop(o, hooks);
    (void)testing::internal::GetCapturedStdout();
    const std::string err = testing::internal::GetCapturedStderr();
    std::size_t n = 0;
    for (std::size_t at = err.find("toy: warning: communication"); at != std::string::npos;
         at = err.find("toy: warning: communication", at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(warnings(1e6, 8), 1u);
  EXPECT_EQ(warnings(1e6, 2), 1u);  // a short run is advised at its end
  EXPECT_EQ(warnings(0, 8), 0u);
}

TEST(Metrics, GradientStatsAndCsvRecords) {
  const std::map<std::string, Tensor> grads{{"a", Tensor::from_vector<float>({3, 4}, {2})},
                                            {"b", Tensor::from_vector<float>({0, 0}, {2})}};
  const auto [norm, variance] = actors::gradient_stats(grads);
  EXPECT_NEAR(norm, 5.0, 1e-9);
  EXPECT_NEAR(variance, 25.0 / 4 - (7.0 / 4) * (7.0 / 4), 1e-9);  // E[g^2] - E[g]^2 over all 4 elements
  const std::string path = test::fresh_dir("metrics") + "/m.csv";
  {
    apps::MetricsWriter w(path, false, "val_psnr");
    apps::StepMetrics m;
    m.step = 1;
    m.loss = 0.5;
    w.write(m);
    m.step = 2;
    m.evaluated = true;
    m.eval = 21.5;
    w.write(m);
  }
  EXPECT_EQ(test::csv_column(path, "step"), (std::vector<double>{1, 2}));
  const auto psnr = test::csv_column(path, "val_psnr");
  EXPECT_TRUE(std::isnan(psnr[0]));
  EXPECT_EQ(psnr[1], 21.5);
  EXPECT_THROW(apps::MetricsWriter("/nonexistent-folder/m.csv", false, "x"), Error);
}

TEST(Progress, PlainLinesWhenNotATerminal) {
  EXPECT_EQ(apps::format_duration(12), "12s");
  EXPECT_EQ(apps::format_duration(187), "3m07s");
  EXPECT_EQ(apps::format_duration(3720), "1h02m");
  std::FILE* f = std::tmpfile();
  apps::Progress p(4, "tok/s", 2, f);
  EXPECT_FALSE(p.interactive());
  for (int s = 1; s <= 4; ++s) p.step(s, 1.0 / s, 100, 0.5);
  p.finish();
  std::rewind(f);
  std::string out(4096, '\0');
  out.resize(std::fread(out.data(), 1, out.size(), f));
  std::fclose(f);
  EXPECT_NE(out.find("step 1/4 loss 1.0000 200 tok/s"), std::string::npos) << out;
  EXPECT_NE(out.find("step 2/4"), std::string::npos);
  EXPECT_EQ(out.find("step 3/4"), std::string::npos) << "logged off-cadence";
  EXPECT_NE(out.find("step 4/4 loss 0.2500"), std::string::npos);
  EXPECT_EQ(out.find('\r'), std::string::npos);
}

TEST(GradMode, ReadsTheEnvironment) {
  ::unsetenv("GRAD_MODE");
  EXPECT_EQ(apps::grad_mode(), apps::GradMode::advanced);
  ::setenv("GRAD_MODE", "standard", 1);
  EXPECT_EQ(apps::grad_mode(), apps::GradMode::standard);
  EXPECT_EQ(apps::clip_mode(apps::GradMode::standard), actors::ClipMode::naive);
  ::setenv("GRAD_MODE", "turbo", 1);
  EXPECT_THROW(apps::grad_mode(), Error);
  ::unsetenv("GRAD_MODE");
}

// A batch the count does not divide keeps its micro-batches (the program splits it unevenly); the
// count never exceeds the batch's rows.
TEST(RunFlags, MicroBatchesAllowUnevenBatchesAndAtMostOnePerRow) {
  apps::RunFlags f;
  EXPECT_EQ(apps::resolve_micro_batches(f, 4, 3), 2);  // the default: 2 on several threads, odd batches too
  EXPECT_EQ(apps::resolve_micro_batches(f, 4, 8), 2);
  EXPECT_EQ(apps::resolve_micro_batches(f, 1, 8), 1);
  EXPECT_EQ(apps::resolve_micro_batches(f, 4, 1), 1);
  f.micro_batches = 2;
  EXPECT_EQ(apps::resolve_micro_batches(f, 1, 3), 2);
  f.micro_batches = 8;
  EXPECT_EQ(apps::resolve_micro_batches(f, 1, 5), 5);
  f.micro_batches = -1;
  EXPECT_THROW(apps::resolve_micro_batches(f, 1, 5), Error);
}

TEST(Models, ShapesAndErrors) {
  Generator gen(1);
  models::GptConfig cfg;
  cfg.d_model = 16;
  cfg.heads = 2;
  cfg.layers = 2;
  cfg.d_ff = 32;
  cfg.seq = 8;
  models::Gpt gpt(cfg, gen);
  EXPECT_EQ(gpt.named_parameters().front().first, "wte.weight");
  const Tensor ids = Tensor::zeros({2, 5}, DType::i64);
  EXPECT_EQ(gpt.logits(graph::Var(ids)).tensor().shape(), (Shape{2, 5, 256}));
  EXPECT_THROW(gpt.logits(graph::Var(Tensor::zeros({1, 9}, DType::i64))), Error);  // longer than --seq
  cfg.heads = 3;
  EXPECT_THROW(models::Gpt(cfg, gen), Error);

  models::SrConfig sc;
  sc.channels = 4;
  sc.blocks = 2;
  models::SrLite sr(sc, gen);
  EXPECT_EQ(sr(graph::Var(Tensor::zeros({2, 3, 6, 5}))).tensor().shape(), (Shape{2, 3, 12, 10}));
  EXPECT_EQ(sr.named_parameters()[2].first, "body.0.conv1.weight");
  EXPECT_THROW(sr(graph::Var(Tensor::zeros({1, 1, 6, 6}))), Error);
  EXPECT_THROW(models::parse_activation("tanh"), Error);
  EXPECT_EQ(models::parse_activation("custom-relu"), models::Activation::custom_relu);
}

TEST(SrData, PairsAreDownsampledAndResumable) {
  apps::SrDataOptions o;
  o.patch = 16;
  o.batch = 2;
  o.held_out = 2;
  apps::SrData a(o), b(o);
  const auto [lr, hr] = a.next();
  EXPECT_EQ(lr.shape(), (Shape{2, 3, 8, 8}));
  EXPECT_EQ(hr.shape(), (Shape{2, 3, 16, 16}));
  EXPECT_EQ(apps::downsample(hr, 2).to_vector<float>(), lr.to_vector<float>());
  const auto second = a.next().second.to_vector<float>();
  b.set_position(2);
  EXPECT_EQ(b.next().second.to_vector<float>(), second);
  EXPECT_EQ(a.held_out().size(), 2u);
  EXPECT_GT(a.bicubic_psnr(), 10);
  o.patch = 15;
  EXPECT_THROW(apps::SrData{o}, Error);
}

namespace {

// A least-squares app on the shared training run: a linear model, batches that depend only on the
// data position, and a log of the parts the run calls.
struct ToyApp {
  std::optional<graph::Linear> model;
  std::uint64_t position = 0;
  std::vector<std::string> calls;
  std::vector<std::pair<double, double>> evaluations;  // (ForwardLoss, the eager loss) of one batch

  static std::vector<Tensor> batch_at(std::uint64_t k) {
    std::vector<float> x(8), y(2);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(k * 8 + i)));
    for (std::size_t r = 0; r < y.size(); ++r) y[r] = 0.5f * (x[4 * r] - x[4 * r + 3]);
    return {Tensor::from_vector(x, {2, 4}), Tensor::from_vector(y, {2, 1})};
  }

  static apps::TrainingSetup setup(double lr) {
    apps::TrainingSetup s;
    s.batch = 2;
    s.lr = lr;
    const graph::SymDim b = graph::SymDim::symbol("batch");
    s.signature = {{"x", {b, 4}}, {"y", {b, 1}}};
    s.forward_program = true;
    s.items_per_step = 2;
    return s;
  }

  apps::TrainingParts parts() {
    apps::TrainingParts p;
    p.load_data = [this](int ranks, std::int64_t) { calls.push_back("load_data " + std::to_string(ranks)); };
    p.build_model = [this]() -> graph::Module& {
      calls.push_back("build_model");
      Generator gen(5);
      return model.emplace(4, 1, gen);
    };
    p.weight_names = [this](const std::map<std::string, Tensor>& w) {
      calls.push_back("weight_names");
      return w;
    };
    p.data_position = [this] { return position; };
    p.set_data_position = [this](std::uint64_t k) {
      calls.push_back("set_data_position " + std::to_string(k));
      position = k;
    };
    p.describe = [this] {
      calls.push_back("describe");
      return std::vector<std::string>{"a linear model"};
    };
    p.loss = [this](const std::vector<graph::Var>& in) { return std::vector<graph::Var>{graph::mse_loss((*model)(in[0]), in[1])}; };
    p.next_batch = [this] { return batch_at(position++); };
    p.evaluate = [this](const apps::ForwardLoss& loss) {
      calls.push_back("evaluate " + std::to_string(position));
      const std::vector<Tensor> held_out = batch_at(1000);
      graph::NoGradGuard no_grad;
      evaluations.emplace_back(loss(held_out), graph::mse_loss((*model)(held_out[0]), held_out[1]).tensor().item());
      return evaluations.back().first;
    };
    p.store_settings = [this](models::CheckpointState& st) {
      calls.push_back("store_settings");
      st.ints["width"] = 4;
    };
    p.summary_fields = [](const apps::LoopSummary& s) { return "\"train_loss\":" + std::to_string(s.train_loss); };
    return p;
  }
};

// Runs a ToyApp with `args` (and `load_weights`) in f32 (--amp O0 unless args say otherwise, so the
// program's evaluations equal eager ones to 1e-6); returns the calls it saw.
std::vector<std::string> run_toy(const std::string& args, const std::string& load_weights = "") {
  CLI::App cli;
  apps::RunFlags flags;
  std::int64_t width = 4;
  double lr = 0.05;
  apps::add_run_flags(cli, flags);
  cli.add_option("--width", width);
  cli.add_option("--lr", lr);
  cli.parse("--amp O0 " + args, false);
  apps::TrainingRun run(cli, "toy-app", flags, load_weights);
  if (run.resumed()) run.settings().take("--width", "width", width);
  ToyApp toy;
  EXPECT_EQ(run.train(ToyApp::setup(lr), toy.parts()), 0);
  for (const auto& [program, eager] : toy.evaluations) EXPECT_NEAR(program, eager, 1e-6 * std::abs(eager) + 1e-9);
  return toy.calls;
}

}  // namespace

// The shared run calls an app's parts in order, saves the app's settings with the step and data
// position, and a resumed run restores the position before it prints or trains.
TEST(TrainingRun, CallsThePartsInOrderSavesAndResumes) {
  const std::string dir = test::fresh_dir("training_run"), ck = dir + "/ck";
  using Calls = std::vector<std::string>;
  EXPECT_EQ(run_toy("--steps 3 --eval-every 2 --threads 1 --save " + ck),
            (Calls{"build_model", "load_data 1", "describe", "evaluate 2", "evaluate 3", "store_settings"}));
  models::Checkpoint saved = models::load_checkpoint(ck, "toy-app");
  EXPECT_EQ(saved.state.int_at("step"), 3);
  EXPECT_EQ(saved.state.int_at("data_position"), 3);
  EXPECT_EQ(saved.state.int_at("width"), 4);

  EXPECT_EQ(run_toy("--steps 5 --eval-every 0 --threads 1 --resume " + ck + " --save " + ck),
            (Calls{"build_model", "load_data 1", "set_data_position 3", "describe", "evaluate 5", "store_settings"}));
  saved = models::load_checkpoint(ck, "toy-app");
  EXPECT_EQ(saved.state.int_at("step"), 5);
  EXPECT_EQ(saved.state.int_at("data_position"), 5);

  EXPECT_EQ(run_toy("--steps 1 --threads 1", saved.folder + "/model.safetensors"),
            (Calls{"build_model", "weight_names", "load_data 1", "describe", "evaluate 1"}));
  EXPECT_THROW(run_toy("--steps 6 --threads 1 --resume " + ck, saved.folder + "/model.safetensors"), Error);
  EXPECT_THROW(run_toy("--steps 6 --threads 1 --width 3 --resume " + ck), Error);  // contradicts the checkpoint
}
