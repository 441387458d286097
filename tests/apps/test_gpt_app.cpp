// troupe-gpt as a user runs it: a tiny model trains (loss falls, the JSON line parses), a resumed
// run equals an uninterrupted one, eager (JIT_LEVEL=0) equals the actor graph (also with uneven
// micro-batches), checkpoints generate text, nanoGPT-named weights load, and bad flags or data give
// one clear line and exit 1.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "apps/app_runner.hpp"
#include "troupe/apps/corpus.hpp"
#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/models/gpt2.hpp"
#include "troupe/models/gpt2_tokenizer.hpp"
#include "troupe/models/gpt_decoder.hpp"
#include "troupe/transport/bootstrap.hpp"

using namespace troupe;
using test::run_app;

namespace {
const std::string kGpt = TROUPE_GPT_BIN;

// A small repetitive corpus, so a tiny model's loss falls within a few steps.
std::string corpus_file(const std::string& dir) {
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path) << apps::generated_corpus(20000);
  return path;
}

std::string tiny(const std::string& data) {
  return kGpt + " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --batch 4 --threads 1 --lr 3e-3 --eval-every 4"
                " --val-batches 2 --amp O0 --data " + data;
}
}  // namespace

TEST(GptApp, TrainsATinyModelAndReportsJson) {
  const std::string dir = test::fresh_dir("gpt_smoke"), data = corpus_file(dir);
  const auto r = run_app(tiny(data) + " --steps 12 --metrics " + dir + "/m.csv");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GRAD_MODE=advanced"), std::string::npos) << r.output;
  const auto j = r.last_json();
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j.at("app"), "troupe-gpt");
  EXPECT_EQ(j.at("steps"), 12);
  for (const char* key : {"train_loss", "val_loss", "ms_per_step", "tokens_per_s", "params", "peak_bytes"})
    EXPECT_GT(j.at(key).get<double>(), 0) << key;
  const auto loss = test::csv_column(dir + "/m.csv", "loss");
  ASSERT_EQ(loss.size(), 12u);
  EXPECT_LT(loss.back(), loss.front() - 0.5) << "the loss did not fall";
  const auto norms = test::csv_column(dir + "/m.csv", "grad_norm");
  const auto peak = test::csv_column(dir + "/m.csv", "peak_bytes");
  EXPECT_GT(norms[0], 0);
  EXPECT_GT(peak[0], 0);
  EXPECT_EQ(test::csv_column(dir + "/m.csv", "val_loss").size(), 12u);
}

TEST(GptApp, ResumeEqualsAnUninterruptedRun) {
  const std::string dir = test::fresh_dir("gpt_resume"), data = corpus_file(dir);
  ASSERT_EQ(run_app(tiny(data) + " --steps 8 --metrics " + dir + "/full.csv").exit_code, 0);
  const auto first = run_app(tiny(data) + " --steps 4 --save " + dir + "/ck --metrics " + dir + "/parts.csv");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run_app(tiny(data) + " --steps 8 --resume " + dir + "/ck --metrics " + dir + "/parts.csv");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resuming at step 4"), std::string::npos) << second.output;
  const auto full = test::csv_column(dir + "/full.csv", "loss"), parts = test::csv_column(dir + "/parts.csv", "loss");
  ASSERT_EQ(full.size(), 8u);
  ASSERT_EQ(parts.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_NEAR(parts[i], full[i], 1e-6 * std::abs(full[i])) << "step " << i + 1;
}

// A warm-up and cosine schedule with gradient accumulation, stopped at step 4 and resumed, gives
// the uninterrupted run's rates and losses: the checkpoint keeps the schedule, its peak and the
// accumulation; a resume that contradicts them is refused.
TEST(GptApp, AScheduledAccumulatedRunResumesExactly) {
  const std::string dir = test::fresh_dir("gpt_schedule"), data = corpus_file(dir);
  const std::string flags = tiny(data) + " --lr-schedule cosine --warmup-steps 2 --min-lr 0.0003 --grad-accum 2";
  const auto full = run_app(flags + " --steps 8 --metrics " + dir + "/full.csv");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_NE(full.output.find("learning rate: warm-up over 2 steps to 0.003, then cosine decay to 0.0003 at step 8"),
            std::string::npos) << full.output;
  EXPECT_NE(full.output.find("gradient accumulation: 2 batches of 4 rows per update"), std::string::npos) << full.output;
  // Stopped early (the decay planned for 8 steps), as a crashed run would be.
  ASSERT_EQ(run_app(flags + " --steps 4 --decay-steps 8 --save " + dir + "/ck --metrics " + dir + "/parts.csv").exit_code, 0);
  // Resumed with the plain flags: the schedule and the accumulation come from the checkpoint.
  const auto second = run_app(tiny(data) + " --steps 8 --resume " + dir + "/ck --metrics " + dir + "/parts.csv");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("--grad-accum 2, --lr-schedule cosine, --warmup-steps 2, --decay-steps 8, --min-lr 3e-04"),
            std::string::npos) << second.output;
  const auto lr = test::csv_column(dir + "/full.csv", "lr");
  ASSERT_EQ(lr.size(), 8u);
  EXPECT_NEAR(lr[0], 0.0015, 1e-12);
  EXPECT_NEAR(lr[1], 0.003, 1e-12);
  EXPECT_NEAR(lr[7], 0.0003, 1e-12);
  EXPECT_EQ(test::csv_column(dir + "/parts.csv", "lr"), lr);
  const auto a = test::csv_column(dir + "/full.csv", "loss"), b = test::csv_column(dir + "/parts.csv", "loss");
  ASSERT_EQ(b.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_NEAR(b[i], a[i], 1e-6 * std::abs(a[i])) << "step " << i + 1;
  const auto refused = run_app(tiny(data) + " --steps 8 --resume " + dir + "/ck --lr-schedule linear");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--lr-schedule linear contradicts the checkpoint"), std::string::npos) << refused.output;
}

// Eager (JIT_LEVEL 0), traced as written (1) and optimised with fusion (3) train alike: 20 steps'
// losses within 1e-5.
TEST(GptApp, EagerStepsEqualActorStepsAtEveryLevel) {
  const std::string dir = test::fresh_dir("gpt_eager"), data = corpus_file(dir);
  const auto eager = run_app("JIT_LEVEL=0 " + tiny(data) + " --steps 20 --metrics " + dir + "/eager.csv");
  ASSERT_EQ(eager.exit_code, 0) << eager.output;
  EXPECT_NE(eager.output.find("JIT_LEVEL=0 (eager)"), std::string::npos);
  const auto e = test::csv_column(dir + "/eager.csv", "loss");
  ASSERT_EQ(e.size(), 20u);
  for (const char* level : {"1", "3"}) {
    const std::string csv = dir + "/level" + level + ".csv";
    ASSERT_EQ(run_app(std::string("JIT_LEVEL=") + level + " " + tiny(data) + " --steps 20 --metrics " + csv).exit_code, 0);
    const auto a = test::csv_column(csv, "loss");
    ASSERT_EQ(a.size(), e.size()) << "level " << level;
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], e[i], 1e-5 * std::abs(e[i])) << "level " << level << ", step " << i + 1;
  }
}

// Batch 3 in 2 micro-batches runs as 2 + 1 rows, weighted by rows: training (loss, gradient norm)
// and the micro-batched evaluation program equal the eager whole-batch run.
TEST(GptApp, UnevenMicroBatchesEqualEagerSteps) {
  const std::string dir = test::fresh_dir("gpt_uneven"), data = corpus_file(dir);
  std::string flags = tiny(data) + " --steps 4 --micro-batches 2";
  flags.replace(flags.find("--batch 4"), 9, "--batch 3");
  const auto actors = run_app(flags + " --metrics " + dir + "/actors.csv");
  ASSERT_EQ(actors.exit_code, 0) << actors.output;
  EXPECT_NE(actors.output.find("2 micro-batches"), std::string::npos) << actors.output;
  const auto eager = run_app("JIT_LEVEL=0 " + flags + " --metrics " + dir + "/eager.csv");
  ASSERT_EQ(eager.exit_code, 0) << eager.output;
  for (const char* column : {"loss", "grad_norm", "val_loss"}) {
    const auto a = test::csv_column(dir + "/actors.csv", column), e = test::csv_column(dir + "/eager.csv", column);
    ASSERT_EQ(a.size(), e.size()) << column;
    ASSERT_FALSE(a.empty()) << column;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(e[i])) {  // no evaluation at this step
        EXPECT_TRUE(std::isnan(a[i])) << column << ", step " << i + 1;
        continue;
      }
      EXPECT_NEAR(a[i], e[i], 1e-5 * std::abs(e[i])) << column << ", step " << i + 1;
    }
  }
}

TEST(GptApp, GeneratesFromACheckpoint) {
  const std::string dir = test::fresh_dir("gpt_generate"), data = corpus_file(dir);
  ASSERT_EQ(run_app(tiny(data) + " --steps 3 --save " + dir + "/ck").exit_code, 0);
  const auto r = run_app(kGpt + " generate --checkpoint " + dir + "/ck --prompt 'The actor' --tokens 30 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("The actor", 0), 0u) << r.output;
  EXPECT_EQ(r.output.size(), std::string("The actor").size() + 30 + 1);  // prompt, 30 bytes, newline
  // Greedy decoding is deterministic.
  EXPECT_EQ(run_app(kGpt + " generate --checkpoint " + dir + "/ck --prompt 'The actor' --tokens 30 --temperature 0").output,
            r.output);
  // The key/value cache (the default) gives the text that recomputing the whole context for every
  // token gives, before and after the context (--seq 16) fills, traced and eager.
  for (const std::string env : {"", "JIT_LEVEL=0 "}) {
    const auto cached = run_app(env + kGpt + " generate --checkpoint " + dir + "/ck --prompt 'The actor' --tokens 30 --temperature 0");
    const auto recomputed =
        run_app(env + kGpt + " generate --recompute --checkpoint " + dir + "/ck --prompt 'The actor' --tokens 30 --temperature 0");
    ASSERT_EQ(recomputed.exit_code, 0) << recomputed.output;
    EXPECT_EQ(cached.output, r.output) << env;
    EXPECT_EQ(recomputed.output, r.output) << env;
  }
  // --amp O1 (the products in bf16) and O3 (every op): the same number of bytes out; at
  // JIT_LEVEL=0 it is refused.
  for (const std::string level : {"O1", "O3"}) {
    const auto low = run_app(kGpt + " generate --amp " + level + " --checkpoint " + dir + "/ck --prompt 'The actor' --tokens 30 --temperature 0");
    ASSERT_EQ(low.exit_code, 0) << low.output;
    EXPECT_EQ(low.output.size(), r.output.size()) << level;
  }
  test::expect_clear_failures({{"JIT_LEVEL=0 " + kGpt + " generate --amp O1 --checkpoint " + dir + "/ck --tokens 3",
                                "--amp O1 rewrites the traced graph"}});
}

// A GPT-2-family checkpoint folder (tests/data/gpt2_tiny: Hugging Face's layout with its
// tokenizer) samples through --model: the prompt encoded by BPE, greedy tokens equal to the
// library's, their bytes printed as they come; bad folders and flags are one clear line.
TEST(GptApp, GeneratesFromAGpt2Checkpoint) {
  const std::string dir = std::string(TROUPE_TEST_DATA_DIR) + "/gpt2_tiny";
  const auto r = run_app(kGpt + " generate --model " + dir + " --prompt 'Hello, world' --tokens 12 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto model = models::load_gpt2(dir);
  const models::Gpt2Tokenizer tokenizer = models::Gpt2Tokenizer::load(dir);
  models::GptDecoder decoder(*model, graph::AmpOptions{}, true);
  graph::NoGradGuard no_grad;
  std::vector<std::int64_t> context = tokenizer.encode("Hello, world");
  std::string expected = "Hello, world";
  std::uint64_t rng = 1;
  for (int k = 0; k < 12; ++k) {
    const std::int64_t next = models::sample_token(decoder.next(context), 0, 0, rng);
    if (next == *tokenizer.end_of_text()) break;
    context.push_back(next);
    expected += tokenizer.token_bytes(next);
  }
  EXPECT_EQ(r.output, expected + "\n");
  test::expect_clear_failures(
      {{kGpt + " generate --model /nonexistent --tokens 3", "'/nonexistent/config.json' does not exist"},
       {kGpt + " generate --model " + dir + " --weights x.safetensors --tokens 3", "exactly one of"},
       {kGpt + " generate --model " + std::string(TROUPE_TEST_DATA_DIR) + "/gpt2_tokenizer --tokens 3", "config.json"}});
}

// A state dict in nanoGPT's names (transformer.h.0.attn.c_attn.weight, ...) loads into the model
// with every tensor in its place, in-process and through --load-weights.
TEST(GptApp, LoadsWeightsWithNanoGptNames) {
  const std::string dir = test::fresh_dir("gpt_weights"), data = corpus_file(dir);
  models::GptConfig cfg;
  cfg.d_model = 32;
  cfg.layers = 1;
  cfg.heads = 2;
  cfg.d_ff = 64;
  cfg.seq = 16;
  Generator gen(3);
  models::Gpt model(cfg, gen);
  std::map<std::string, Tensor> nano;
  const std::map<std::string, std::string> rename = {
      {"wte.weight", "transformer.wte.weight"}, {"wpe.weight", "transformer.wpe.weight"},
      {"ln_f.weight", "transformer.ln_f.weight"}, {"ln_f.bias", "transformer.ln_f.bias"},
      {"blocks.0.ln1.weight", "transformer.h.0.ln_1.weight"}, {"blocks.0.ln1.bias", "transformer.h.0.ln_1.bias"},
      {"blocks.0.ln2.weight", "transformer.h.0.ln_2.weight"}, {"blocks.0.ln2.bias", "transformer.h.0.ln_2.bias"},
      {"blocks.0.attn.qkv.weight", "transformer.h.0.attn.c_attn.weight"},
      {"blocks.0.attn.qkv.bias", "transformer.h.0.attn.c_attn.bias"},
      {"blocks.0.attn.proj.weight", "transformer.h.0.attn.c_proj.weight"},
      {"blocks.0.attn.proj.bias", "transformer.h.0.attn.c_proj.bias"},
      {"blocks.0.mlp.fc.weight", "transformer.h.0.mlp.c_fc.weight"}, {"blocks.0.mlp.fc.bias", "transformer.h.0.mlp.c_fc.bias"},
      {"blocks.0.mlp.proj.weight", "transformer.h.0.mlp.c_proj.weight"},
      {"blocks.0.mlp.proj.bias", "transformer.h.0.mlp.c_proj.bias"}, {"lm_head.weight", "lm_head.weight"}};
  const auto own = model.state_dict();
  ASSERT_EQ(own.size(), rename.size());
  for (const auto& [name, t] : own) nano[rename.at(name)] = t;
  const auto mapped = models::from_nanogpt_names(nano);
  ASSERT_EQ(mapped.size(), own.size());
  for (const auto& [name, t] : own) EXPECT_EQ(mapped.at(name).storage(), t.storage()) << name;
  const std::string file = dir + "/nano.safetensors";
  graph::save_safetensors(file, nano);
  const auto r = run_app(tiny(data) + " --steps 1 --load-weights " + file);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Wrong shapes (another model size) and unexpected tensors are refused naming the file and the tensor.
  std::map<std::string, Tensor> extra = nano;
  extra["transformer.h.7.attn.bias"] = Tensor::zeros({2});
  graph::save_safetensors(dir + "/extra.safetensors", extra);
  test::expect_clear_failures({
      {kGpt + " --d-model 64 --layers 1 --heads 2 --steps 1 --data " + data + " --load-weights " + file,
       "'" + file + "' does not fit the model: load_state_dict: parameter 'wte.weight'"},
      {tiny(data) + " --steps 1 --load-weights " + dir + "/extra.safetensors",
       "'" + dir + "/extra.safetensors' does not fit the model: load_state_dict: unexpected entries: transformer.h.7.attn.bias"},
  });
}

// Retention keeps what `latest` names: a fresh run into a folder that holds a run is refused
// (before this, it trained, saved step 1 and pruned it at once, leaving `latest` dangling), and
// an unwritable --save is refused before the first step.
TEST(GptApp, SaveFoldersThatWouldLoseOrFailAreRefusedBeforeTraining) {
  const std::string dir = test::fresh_dir("gpt_save"), data = corpus_file(dir), ck = dir + "/ck";
  ASSERT_EQ(run_app(tiny(data) + " --steps 4 --save-every 2 --save " + ck).exit_code, 0);
  std::ofstream(dir + "/file.txt") << "a file, not a folder";
  test::expect_clear_failures({
      {tiny(data) + " --steps 1 --save " + ck, "--save '" + ck + "' already holds a run; continue it with --resume " + ck},
      {tiny(data) + " --steps 1 --save " + dir + "/file.txt", "is a file; pass a folder"},
      {tiny(data) + " --steps 1 --save " + dir + "/file.txt/ck", "cannot create the checkpoint folder"},
  });
  for (const std::string& save : {ck, dir + "/file.txt/ck"})
    EXPECT_EQ(run_app(tiny(data) + " --steps 1 --save " + save).output.find("step 1/1"), std::string::npos)
        << "trained before refusing " << save;
  const auto resumed = run_app(tiny(data) + " --steps 6 --resume " + ck + " --save " + ck);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming at step 4"), std::string::npos) << resumed.output;
}

// A resumed run takes the model, data and batch from its checkpoint and says so; a flag that
// contradicts them is refused, a new --lr is honoured; a state.json that cannot be built and an
// empty `latest` are named.
TEST(GptApp, ResumeTakesItsSettingsFromTheCheckpoint) {
  const std::string dir = test::fresh_dir("gpt_resume_flags"), data = corpus_file(dir), ck = dir + "/ck";
  ASSERT_EQ(run_app(tiny(data) + " --steps 2 --save " + ck).exit_code, 0);
  const auto plain = run_app(kGpt + " --steps 3 --threads 1 --resume " + ck);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("from the checkpoint: --d-model 32, --layers 1, --heads 2, --d-ff 64, --seq 16, --batch 4, "
                              "--seed 1, --data " + data + ", --lr 0.003"),
            std::string::npos)
      << plain.output;
  const auto new_lr = run_app(kGpt + " --steps 3 --threads 1 --lr 1e-4 --resume " + ck);
  ASSERT_EQ(new_lr.exit_code, 0) << new_lr.output;
  EXPECT_NE(new_lr.output.find("from the flags: --lr 0.0001 (the checkpoint had 0.003)"), std::string::npos) << new_lr.output;
  const std::string state = ck + "/step-00000002/state.json";
  test::expect_clear_failures({
      {kGpt + " --steps 3 --d-model 64 --resume " + ck,
       "--d-model 64 contradicts the checkpoint '" + state + "' (d_model 32); drop --d-model"},
      {kGpt + " --steps 3 --batch 8 --resume " + ck, "--batch 8 contradicts"},
      {kGpt + " --steps 3 --data " + dir + "/other.txt --resume " + ck, "--data " + dir + "/other.txt contradicts"},
      {kGpt + " --steps 3 --load-weights x.safetensors --resume " + ck, "--resume and --load-weights"},
      {kGpt + " generate --checkpoint " + ck + " --layers 2", "--layers 2 contradicts the checkpoint '" + state + "'"},
  });
  // An optimizer state whose learning rate is an empty tensor (it used to train with a garbage rate).
  const std::string opt = ck + "/step-00000002/optimizer.safetensors";
  auto tensors = graph::load_safetensors(opt).tensors;
  tensors["group0.lr"] = Tensor::empty({0}, DType::f64);
  graph::save_safetensors(opt + ".bad", tensors);
  std::filesystem::rename(opt, opt + ".good");
  std::filesystem::rename(opt + ".bad", opt);
  test::expect_clear_failures({{kGpt + " --steps 3 --resume " + ck,
                                "'" + opt + "' does not fit the optimizer: optimizer load_state_dict: 'group0.lr' must be "
                                "one floating-point number"}});
  std::filesystem::rename(opt + ".good", opt);
  // A state.json edited into a model that cannot be built, then an empty `latest`.
  std::ifstream in(state);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const std::string heads = "\"heads\": 2";
  ASSERT_NE(text.find(heads), std::string::npos) << text;
  text.replace(text.find(heads), heads.size(), "\"heads\": 3");
  std::ofstream(state) << text;
  test::expect_clear_failures({
      {kGpt + " --steps 3 --resume " + ck, "'" + state + "' holds a model that cannot be built: gpt: d_model 32 is not divisible by heads 3"},
      {kGpt + " generate --checkpoint " + ck, "'" + state + "' holds a model that cannot be built"},
  });
  std::ofstream(ck + "/latest").close();
  test::expect_clear_failures({{kGpt + " --steps 3 --resume " + ck, "'" + ck + "/latest' is empty"}});
}

// Sizes that cannot fit are refused up front with the memory they would need.
TEST(GptApp, ImpossibleSizesAreRefusedWithTheMemoryNeeded) {
  const std::string dir = test::fresh_dir("gpt_huge"), data = corpus_file(dir);
  test::expect_clear_failures({
      {kGpt + " --steps 1 --seq 1000000 --batch 1000000 --data " + data, "would need at least"},
      {kGpt + " --steps 1 --d-model 65536 --layers 4096 --heads 1 --data " + data, "more than this machine's"},
  });
}

// Each bad input: exit code 1 (CLI11's own for flag syntax), one error line naming the problem.
TEST(GptApp, BadFlagsAndDataGiveOneClearLine) {
  const std::string dir = test::fresh_dir("gpt_bad"), data = corpus_file(dir);
  std::ofstream(dir + "/empty.txt").close();
  std::ofstream(dir + "/short.txt") << "far too short for a window";
  test::expect_clear_failures({
      {tiny(dir + "/missing.txt") + " --steps 1", "missing.txt"},
      {tiny(dir + "/empty.txt") + " --steps 1", "is empty"},
      {tiny(dir) + " --steps 1", "'" + dir + "' is a folder; --data takes a text file"},
      {tiny(dir + "/short.txt") + " --steps 1", "(file " + dir + "/short.txt) has 26 bytes, too few"},
      {tiny(data) + " --steps 1 --val-batches 0", "--val-batches: must be from 1 to 1000000, got 0"},
      {tiny(data) + " --steps 1 --lr nan", "--lr: must be between 0 and 10 (both excluded), got nan"},
      {tiny(data) + " --steps 1 --val-fraction 1", "--val-fraction: must be between 0 and 1"},
      {tiny(data) + " --steps 0", "--steps: must be from 1"},
      {tiny(data) + " --steps 1 --threads -1", "--threads: must be from 0 to 4096 (0 = all cores), got -1"},
      {tiny(data) + " --steps 1 --load-weights " + dir, "is a folder; --load-weights takes a .safetensors file"},
      {kGpt + " generate --weights " + dir + " --prompt hi", "is a folder; --weights takes a .safetensors file"},
      {kGpt + " generate --checkpoint " + dir + " --top-k -1", "--top-k: must be from 0 to 16777216"},
      {kGpt + " --d-model 30 --heads 4 --steps 1 --data " + data, "not divisible by heads"},
      {"GRAD_MODE=fancy " + tiny(data) + " --steps 1", "GRAD_MODE='fancy'"},
      {"JIT_LEVEL=9 " + tiny(data) + " --steps 1", "JIT_LEVEL"},
      {tiny(data) + " --steps 1 --resume " + dir + "/nothing", "holds no checkpoint"},
      {kGpt + " generate --prompt hi", "--checkpoint"},
      {kGpt + " --layers many", "--layers"},
      {kGpt + " --no-such-flag", "no-such-flag"},
  });
}

// --dp 2 under troupe-launch: both ranks report the same loss every step, and it equals one
// process at twice the per-rank batch (1e-5 relative over 10 steps, in f32: bf16 rounds each
// rank's half-batch gradients on their own); --check-grads finds the ranks' post-reduce gradient
// norms equal (no warning).
TEST(GptApp, DataParallelEqualsOneProcessAtTheGlobalBatch) {
  const std::string dir = test::fresh_dir("gpt_dp"), data = corpus_file(dir);
  const std::string common = " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --threads 1 --lr 3e-3 --eval-every 100"
                             " --steps 10 --comm-fusion-mb 0.01 --amp O0 --data " + data;
  ASSERT_EQ(run_app(kGpt + common + " --batch 8 --metrics " + dir + "/single.csv").exit_code, 0);
  const auto dp = run_app(std::string(TROUPE_LAUNCH_BIN) + " -n 2 --timeout 20 -- " + kGpt + common +
                          " --batch 4 --dp 2 --check-grads --metrics " + dir + "/dp.csv");
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  EXPECT_NE(dp.output.find("[rank 1] troupe-gpt: data parallel: replica 1 of 2 (troupe-launch)"), std::string::npos) << dp.output;
  EXPECT_EQ(dp.output.find("gradient norm"), std::string::npos) << dp.output;  // --check-grads found no difference
  const auto single = test::csv_column(dir + "/single.csv", "loss"), parallel = test::csv_column(dir + "/dp.csv", "loss");
  ASSERT_EQ(parallel.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_NEAR(parallel[i], single[i], 1e-5 * std::abs(single[i])) << "step " << i + 1;
  // Both ranks' final lines carry the same training loss.
  std::vector<double> finals;
  for (const auto& line : dp.lines())
    if (line.find("] {\"app\"") != std::string::npos)
      finals.push_back(nlohmann::json::parse(line.substr(line.find('{'))).at("train_loss").get<double>());
  ASSERT_EQ(finals.size(), 2u);
  EXPECT_EQ(finals[0], finals[1]);
  // Without --comm-fusion-mb the buckets are sized from the ranks' link, measured at start.
  const std::string measured = common.substr(0, common.find(" --comm-fusion-mb")) + " --amp O0 --data " + data;
  const auto link = run_app(std::string(TROUPE_LAUNCH_BIN) + " -n 2 --timeout 20 -- " + kGpt + measured + " --batch 4 --dp 2");
  ASSERT_EQ(link.exit_code, 0) << link.output;
  EXPECT_NE(link.output.find("[rank 1] troupe-gpt: data parallel: replica 1 of 2 (troupe-launch), per-replica batch 4, "
                             "global batch 8, buckets of "), std::string::npos) << link.output;
  EXPECT_NE(link.output.find("(the link measured "), std::string::npos) << link.output;
  // --dp without the job around it is refused, naming what to do.
  const auto alone = run_app(kGpt + common + " --batch 4 --dp 2");
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_NE(alone.output.find("troupe-launch -n 2"), std::string::npos) << alone.output;
}

// Dropout draws from (seed, step, site, row of the global batch): eager or fused steps, two
// threads with micro-batches, two data-parallel replicas, two tensor-parallel shards and a resumed
// run all train as one process does, to rounding; without dropout the run differs.
TEST(GptApp, DropoutDrawsAlikeAtAnyLayoutAndAfterResume) {
  const std::string dir = test::fresh_dir("gpt_dropout"), data = corpus_file(dir);
  const std::string common = " --d-model 32 --layers 2 --heads 2 --d-ff 64 --seq 16 --lr 3e-3 --eval-every 100 --steps 6"
                             " --comm-fusion-mb 0.01 --amp O0 --data " + data + " --dropout ";
  const auto one = run_app(kGpt + common + "0.2 --threads 1 --batch 8 --metrics " + dir + "/one.csv");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("dropout 0.2 while training"), std::string::npos) << one.output;
  const auto want = test::csv_column(dir + "/one.csv", "loss");
  ASSERT_EQ(want.size(), 6u);
  const auto expect_alike = [&](const std::string& name, const std::string& command) {
    const auto run = run_app(command + " --metrics " + dir + "/" + name + ".csv");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto got = test::csv_column(dir + "/" + name + ".csv", "loss");
    ASSERT_EQ(got.size(), want.size()) << name;
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5 * std::abs(want[i])) << name << ", step " << i + 1;
  };
  expect_alike("eager", "JIT_LEVEL=0 " + kGpt + common + "0.2 --threads 1 --batch 8");
  expect_alike("unfused", "JIT_LEVEL=1 " + kGpt + common + "0.2 --threads 1 --batch 8");
  expect_alike("threads", kGpt + common + "0.2 --threads 2 --micro-batches 3 --batch 8");
  const std::string launch = std::string(TROUPE_LAUNCH_BIN) + " -n 2 --timeout 30 -- " + kGpt + common + "0.2 --threads 1";
  expect_alike("dp", launch + " --batch 4 --dp 2");
  expect_alike("tp", launch + " --batch 8 --tp 2");
  const std::string first_half = common.substr(0, common.find(" --steps")) + " --steps 3" + common.substr(common.find(" --steps") + 10);
  ASSERT_EQ(run_app(kGpt + first_half + "0.2 --threads 1 --batch 8 --save " + dir + "/ck --metrics " + dir + "/resumed.csv").exit_code, 0);
  expect_alike("resumed", kGpt + common + "0.2 --threads 1 --batch 8 --resume " + dir + "/ck");
  const auto plain = run_app(kGpt + common + "0 --threads 1 --batch 8 --metrics " + dir + "/plain.csv");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_GT(std::abs(test::csv_column(dir + "/plain.csv", "loss")[1] - want[1]), 1e-3);
}

// --dp 2 launched by Open MPI's mpirun instead of troupe-launch: the ranks find their places in
// OMPI_COMM_WORLD_* and train like one process at the global batch.
TEST(GptApp, DataParallelUnderMpirunEqualsOneProcess) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "no mpirun on this machine (scripts/setup.sh installs Open MPI)";
  const std::string dir = test::fresh_dir("gpt_mpirun"), data = corpus_file(dir);
  const std::string common = " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --threads 1 --lr 3e-3 --eval-every 100"
                             " --steps 5 --comm-fusion-mb 0.01 --amp O0 --data " + data;
  ASSERT_EQ(run_app(kGpt + common + " --batch 8 --metrics " + dir + "/single.csv").exit_code, 0);
  // Open MPI refuses root unless told; CI runs as root.
  const auto dp = run_app("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 -x "
                          "TROUPE_MASTER_PORT=" + std::to_string(transport::free_local_port()) + " " + kGpt + common +
                          " --batch 4 --dp 2 --metrics " + dir + "/dp.csv");
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  EXPECT_NE(dp.output.find("troupe-gpt: data parallel: replica 1 of 2 (mpirun)"), std::string::npos) << dp.output;
  const auto single = test::csv_column(dir + "/single.csv", "loss"), parallel = test::csv_column(dir + "/dp.csv", "loss");
  ASSERT_EQ(parallel.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_NEAR(parallel[i], single[i], 1e-5 * std::abs(single[i])) << "step " << i + 1;
}

// troupe-launch --max-restarts: rank 1 dies (SIGKILL) once the job's first checkpoint exists; the
// launcher stops rank 0, starts the job again, every rank resumes from the last checkpoint, and
// the losses of every step equal an uninterrupted run's (the data position travels in the
// checkpoint; a step run twice is taken from the resumed run).
TEST(GptApp, AJobRestartedAfterARankDiesResumesExactly) {
  const std::string dir = test::fresh_dir("gpt_restart"), data = corpus_file(dir);
  const std::string common = " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --threads 1 --lr 3e-3 --eval-every 100"
                             " --steps 40 --save-every 2 --comm-fusion-mb 0.01 --amp O0 --batch 4 --dp 2 --data " + data;
  const std::string launch = std::string(TROUPE_LAUNCH_BIN) + " -n 2 --timeout 10 ";
  ASSERT_EQ(run_app(launch + "-- " + kGpt + common + " --save " + dir + "/whole --metrics " + dir + "/whole.csv").exit_code, 0);
  // On the first attempt rank 1 runs the app in the background and kills it once a save exists.
  const std::string ck = dir + "/ck";
  const std::string dies = "if [ \"$TROUPE_RESTART\" = 0 ] && [ \"$TROUPE_RANK\" = 1 ]; then \"$@\" & p=$!; "
                           "while [ ! -e " + ck + "/latest ] && kill -0 $p 2>/dev/null; do sleep 0.01; done; "
                           "kill -9 $p; exit 9; fi; exec \"$@\"";
  const auto run = run_app(launch + "--max-restarts 1 -- sh -c '" + dies + "' rank " + kGpt + common + " --save " + ck +
                           " --metrics " + dir + "/restarted.csv");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("troupe-launch: rank 1 exited with code 9; stopping the other ranks"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("troupe-launch: restarting the job (restart 1 of 1)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("[rank 0] troupe-gpt: restart 1: resuming from the last checkpoint in '" + ck + "'"),
            std::string::npos)
      << run.output;
  const auto steps = test::csv_column(dir + "/restarted.csv", "step"), losses = test::csv_column(dir + "/restarted.csv", "loss");
  std::map<int, double> last;  // a step run before the crash and again after the resume: the resumed one
  for (std::size_t i = 0; i < steps.size(); ++i) last[static_cast<int>(steps[i])] = losses[i];
  const auto whole = test::csv_column(dir + "/whole.csv", "loss");
  ASSERT_EQ(last.size(), whole.size());
  for (std::size_t i = 0; i < whole.size(); ++i)
    EXPECT_NEAR(last[static_cast<int>(i) + 1], whole[i], 1e-6 * std::abs(whole[i])) << "step " << i + 1;
  // A job that fails again after its restarts ends with the failing rank's code.
  const auto always = run_app(launch + "--max-restarts 1 -- sh -c 'exit 4'");
  EXPECT_EQ(always.exit_code, 4);
  EXPECT_NE(always.output.find("restarting the job (restart 1 of 1)"), std::string::npos) << always.output;
}

// Gradient compression across a save: PowerSGD's error feedback and warm start are in the
// checkpoint, so a dp 2 run stopped two compressed steps in (after the 10 whole ones) and resumed
// gives the uninterrupted losses. Auto says once what it chose. A strategy file keeps the
// compression it was saved with, and refuses settings that contradict it.
TEST(GptApp, CompressedRunsResumeExactlyAndStrategyFilesKeepTheCompression) {
  const std::string dir = test::fresh_dir("gpt_compressed"), data = corpus_file(dir);
  const std::string launch = std::string(TROUPE_LAUNCH_BIN) + " -n 2 --timeout 30 -- ";
  const std::string common = " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --threads 1 --lr 3e-3 --eval-every 100"
                             " --comm-fusion-mb 0.01 --amp O0 --batch 4 --data " + data;
  const std::string dp = launch + kGpt + common + " --dp 2 --grad-compression powersgd:2";
  ASSERT_EQ(run_app(dp + " --steps 14 --metrics " + dir + "/whole.csv").exit_code, 0);
  const auto first = run_app(dp + " --steps 12 --save " + dir + "/ck --metrics " + dir + "/parts.csv");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run_app(dp + " --steps 14 --resume " + dir + "/ck --metrics " + dir + "/parts.csv");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto whole = test::csv_column(dir + "/whole.csv", "loss"), parts = test::csv_column(dir + "/parts.csv", "loss");
  ASSERT_EQ(whole.size(), 14u);
  ASSERT_EQ(parts.size(), 14u);
  for (std::size_t i = 0; i < 14; ++i) EXPECT_NEAR(parts[i], whole[i], 1e-6 * whole[i]) << "step " << i + 1;

  const auto automatic = run_app(launch + kGpt + common + " --dp 2 --grad-compression auto --steps 8");
  ASSERT_EQ(automatic.exit_code, 0) << automatic.output;
  EXPECT_NE(automatic.output.find("[rank 0] troupe-gpt: step 7: gradient compression auto (5 steps measured, the ranks' mean)"),
            std::string::npos) << automatic.output;

  const std::string tp = launch + kGpt + common + " --tp 2 --steps 2";
  ASSERT_EQ(run_app(tp + " --grad-compression bf16 --strategy-save " + dir + "/plan.json").exit_code, 0);
  std::ifstream file(dir + "/plan.json");
  const auto plan = nlohmann::json::parse(file);
  EXPECT_EQ(plan.at("grad_compression"), "bf16");
  const auto contradicted = run_app(tp + " --grad-compression powersgd:2 --strategy-load " + dir + "/plan.json");
  EXPECT_NE(contradicted.exit_code, 0);
  EXPECT_NE(contradicted.output.find("strategy file '" + dir + "/plan.json' compresses the gradients as bf16, the settings "
                                     "as powersgd:2; pass --grad-compression bf16 or none (to take the file's)"),
            std::string::npos) << contradicted.output;
}

// --save-every-min saves on the clock as well as at the end; with --dp the ranks vote on each
// step (a rank whose clock says it is time is enough), so they save the same steps: with ZeRO-1
// every rank takes part in a save (the optimizer state is gathered), and ranks that disagreed
// would wait for each other until the timeout. The checkpoint resumes like any other.
TEST(GptApp, SavesOnTheClockAgreedByTheRanks) {
  const std::string dir = test::fresh_dir("gpt_save_clock"), data = corpus_file(dir);
  const std::string common = " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --threads 1 --eval-every 1000"
                             " --steps 100 --save-every 0 --save-every-min 0.0005 --amp O0 --batch 4 --data " + data;
  const auto dp = run_app(std::string(TROUPE_LAUNCH_BIN) + " -n 2 --timeout 20 -- " + kGpt + common + " --dp 2 --zero 1 --save " +
                          dir + "/ck");
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  std::size_t saves = 0;
  for (const auto& line : dp.lines())
    saves += line.rfind("[rank 0] step ", 0) == 0 && line.find(": checkpoint saved") != std::string::npos;
  EXPECT_GE(saves, 2u) << "a save on the clock besides the last: " << dp.output;
  const auto resumed = run_app(kGpt + " --threads 1 --eval-every 1000 --steps 101 --amp O0 --resume " + dir + "/ck");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming at step 100"), std::string::npos) << resumed.output;
}

// troupe-launch: every rank gets its place in the job; a failing rank stops the others at once
// and its exit code is the launcher's.
TEST(Launch, SetsTheJobAndStopsEveryoneWhenARankFails) {
  const std::string launch = TROUPE_LAUNCH_BIN;
  const auto ok = run_app(launch + " -n 3 -- sh -c 'echo rank $TROUPE_RANK of $TROUPE_WORLD_SIZE, $TROUPE_LOCAL_WORLD_SIZE here, token ${#TROUPE_JOB_TOKEN}'");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(ok.output.find("[rank " + std::to_string(r) + "] rank " + std::to_string(r) + " of 3, 3 here, token 32"), std::string::npos)
        << ok.output;
  const auto t0 = std::chrono::steady_clock::now();
  const auto bad = run_app(launch + " -n 2 -- sh -c 'if [ $TROUPE_RANK = 1 ]; then exit 7; fi; sleep 60'");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(bad.exit_code, 7);
  EXPECT_NE(bad.output.find("rank 1 exited with code 7; stopping the other ranks"), std::string::npos) << bad.output;
  EXPECT_NE(run_app(launch + " --no-such-flag -- true").exit_code, 0);
  test::expect_clear_failures({
      {launch + " -n 0 -- true", "troupe-launch: --nproc: must be from 1 to 1024 (ranks on this machine), got 0"},
      {launch + " -n 2 --port 70000 -- true", "--port: must be from 0 to 65535 (a TCP port; 0 = a free one), got 70000"},
      {launch + " -n 2 --timeout 0 -- true", "--timeout: must be from 1 to 86400"},
  });
}

// --amp O1: the start-up line names the level and the ISA (or the warning says why the run stays
// f32), the losses track O0's (and O2's and O3's), --amp auto picks O2 where it can, a checkpoint saved at O1 resumes at O0 (f32 weights at every level),
// and the combinations that cannot run are refused with one line.
TEST(GptApp, MixedPrecisionTracksF32AndResumesAcrossLevels) {
  const std::string dir = test::fresh_dir("gpt_amp"), data = corpus_file(dir);
  const auto f32 = run_app(tiny(data) + " --steps 8 --metrics " + dir + "/o0.csv");
  const auto o1 = run_app(tiny(data) + " --steps 8 --amp O1 --metrics " + dir + "/o1.csv");
  ASSERT_EQ(o1.exit_code, 0) << o1.output;
  const bool native = kernels::native_low_precision(DType::bf16);
  EXPECT_NE(o1.output.find(native ? "mixed precision: O1, matrix products and convolutions in bf16 on " : "has no native bf16"),
            std::string::npos) << o1.output;
  const auto l0 = test::csv_column(dir + "/o0.csv", "loss"), l1 = test::csv_column(dir + "/o1.csv", "loss");
  ASSERT_EQ(l0.size(), l1.size());
  for (std::size_t i = 0; i < l0.size(); ++i) EXPECT_NEAR(l1[i], l0[i], 0.02 * l0[i]) << "step " << i + 1;
  if (native) {
    EXPECT_NE(l1.back(), l0.back());  // the products did run in bf16
  }
  ASSERT_EQ(run_app(tiny(data) + " --steps 4 --amp O1 --save " + dir + "/ck").exit_code, 0);
  const auto resumed = run_app(tiny(data) + " --steps 6 --amp O0 --resume " + dir + "/ck");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming at step 4"), std::string::npos) << resumed.output;
  // O2 (activations in bf16, f32 masters): over 100 steps the losses stay within 3% of f32's.
  if (native) {
    ASSERT_EQ(run_app(tiny(data) + " --steps 100 --metrics " + dir + "/long0.csv").exit_code, 0);
    const auto o2 = run_app(tiny(data) + " --steps 100 --amp O2 --metrics " + dir + "/long2.csv");
    ASSERT_EQ(o2.exit_code, 0) << o2.output;
    EXPECT_NE(o2.output.find("mixed precision: O2, activations in bf16"), std::string::npos) << o2.output;
    const auto a = test::csv_column(dir + "/long0.csv", "loss"), b = test::csv_column(dir + "/long2.csv", "loss");
    ASSERT_EQ(a.size(), 100u);
    ASSERT_EQ(b.size(), 100u);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 0.03 * a[i]) << "step " << i + 1;
    // O3 (every op in bf16): the first steps' losses stay within 5% of f32's.
    const auto o3 = run_app(tiny(data) + " --steps 8 --amp O3 --metrics " + dir + "/o3.csv");
    ASSERT_EQ(o3.exit_code, 0) << o3.output;
    EXPECT_NE(o3.output.find("mixed precision: O3, every op in bf16"), std::string::npos) << o3.output;
    const auto c = test::csv_column(dir + "/o3.csv", "loss");
    ASSERT_EQ(c.size(), 8u);
    for (std::size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], a[i], 0.05 * a[i]) << "step " << i + 1;
  }
  // Training defaults to --amp auto: O2 where the CPU computes bf16 natively, else O0, said at
  // start; eager mode (JIT_LEVEL=0) runs auto in f32. Sampling defaults to O0.
  EXPECT_NE(run_app(kGpt + " --help").output.find("--amp TEXT:{auto,O0,O1,O2,O3}=auto"), std::string::npos);
  EXPECT_NE(run_app(kGpt + " generate --help").output.find("--amp TEXT:{auto,O0,O1,O2,O3}=O0"), std::string::npos);
  const auto automatic = run_app(tiny(data) + " --steps 2 --amp auto");
  ASSERT_EQ(automatic.exit_code, 0) << automatic.output;
  EXPECT_NE(automatic.output.find(native ? "mixed precision: O2 (--amp auto), activations in bf16"
                                         : "mixed precision: O0 (--amp auto), f32; this CPU has no native low precision"),
            std::string::npos) << automatic.output;
  const auto eager = run_app("JIT_LEVEL=0 " + tiny(data) + " --steps 2 --amp auto");
  ASSERT_EQ(eager.exit_code, 0) << eager.output;
  EXPECT_NE(eager.output.find("mixed precision: O0 (--amp auto), f32; JIT_LEVEL=0 runs eagerly"), std::string::npos)
      << eager.output;
  // Dynamic loss scaling: every step at 2^16 (none overflows), counted in the metrics and the final
  // line, and the scaler's state saved with the checkpoint and taken up by --resume.
  const auto scaled = run_app(tiny(data) + " --steps 4 --amp O1 --loss-scale dynamic --save " + dir + "/scaled --metrics " +
                              dir + "/scaled.csv");
  ASSERT_EQ(scaled.exit_code, 0) << scaled.output;
  EXPECT_NE(scaled.output.find("dynamic loss scaling from 2^16"), std::string::npos) << scaled.output;
  EXPECT_EQ(scaled.last_json().at("skipped_steps"), 0);
  for (double s : test::csv_column(dir + "/scaled.csv", "loss_scale")) EXPECT_EQ(s, 65536);
  for (double s : test::csv_column(dir + "/scaled.csv", "skipped")) EXPECT_EQ(s, 0);
  const auto scaled_losses = test::csv_column(dir + "/scaled.csv", "loss");
  for (std::size_t i = 0; i < scaled_losses.size(); ++i) EXPECT_NEAR(scaled_losses[i], l1[i], 1e-4 * l1[i]);
  std::ifstream state(dir + "/scaled/step-00000004/state.json");
  const std::string text((std::istreambuf_iterator<char>(state)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"loss_scaler.scale\""), std::string::npos) << text;
  const auto scaled_resumed = run_app(tiny(data) + " --steps 6 --amp O1 --loss-scale dynamic --resume " + dir + "/scaled --save " + dir + "/scaled");
  ASSERT_EQ(scaled_resumed.exit_code, 0) << scaled_resumed.output;
  {  // the resumed run reads the scaler's state: a damaged one is refused
    const std::string path = dir + "/scaled/step-00000006/state.json";
    std::ifstream in(path);
    std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = saved.find("\"loss_scaler.scale\": \"65536\"");
    ASSERT_NE(at, std::string::npos) << saved;
    saved.replace(at, 28, "\"loss_scaler.scale\": \"oops\"");
    std::ofstream(path) << saved;
  }
  std::vector<test::BadInput> bad{
      {"JIT_LEVEL=0 " + tiny(data) + " --steps 1 --amp O1", "--amp O1 rewrites the traced graph"},
      {"JIT_LEVEL=0 " + tiny(data) + " --steps 1 --loss-scale dynamic", "--loss-scale dynamic needs the actor runtime"},
      {tiny(data) + " --steps 1 --loss-scale sometimes", "--loss-scale"},
      {tiny(data) + " --steps 8 --amp O1 --loss-scale dynamic --resume " + dir + "/scaled",
       "loss scaler state: 'scale' is 'oops'"},
      {tiny(data) + " --steps 1 --amp O4", "--amp"},
      {tiny(data) + " --steps 1 --amp O3 --loss-scale dynamic", "--amp O3 trains with a loss scale of 1"},
      {tiny(data) + " --steps 1 --amp-dtype int8", "--amp-dtype"}};
  if (!kernels::native_low_precision(DType::f16))
    bad.push_back({tiny(data) + " --steps 1 --amp O1 --amp-dtype fp16", "no f16 matrix products; use --amp-dtype bf16"});
  test::expect_clear_failures(bad);
}

// --plan-only prints the hybrid-parallel plan as JSON without training: Megatron's four
// all-reduces per block on the tensor axis and two at the vocab-parallel tables, the qkv rows
// grouped by head, the memory per rank (halved optimizer state with --zero 1 on two data-parallel
// ranks); a strategy file saved and loaded gives the same plan, and one for another model is
// refused; without --tp the meshes are searched; heads that do not split are refused.
TEST(GptApp, PlanOnlyPrintsTheHybridParallelPlan) {
  const std::string dir = test::fresh_dir("gpt_plan"), data = corpus_file(dir);
  const std::string plan = tiny(data) + " --plan-only --dp 2 --tp 2";
  const auto r = run_app(plan + " --strategy-save " + dir + "/plan.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = r.last_json();
  EXPECT_EQ(j.at("mesh"), "dp=2 x tp=2");
  int tensor_axis = 0;
  for (const auto& c : j.at("collectives")) tensor_axis += c.at("axis") == "tp";
  EXPECT_EQ(tensor_axis, 6) << "one block: two all-reduces forward, two backward; the embedding's lookup, the head's input gradient";
  bool grouped = false;
  for (const auto& p : j.at("parameters"))
    if (p.at("name") == "blocks.0.attn.qkv.weight") grouped = p.at("placement") == nlohmann::json::array({"B", "S(0)x3"});
  EXPECT_TRUE(grouped) << j.at("parameters").dump();
  for (const char* key : {"parameters", "gradients", "optimizer_state", "activations"})
    EXPECT_GT(j.at("memory_per_rank").at(key).get<double>(), 0) << key;
  EXPECT_GT(j.at("predicted_ms").get<double>(), 0);

  const auto loaded = run_app(plan + " --strategy-load " + dir + "/plan.json");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_EQ(loaded.last_json().at("ops"), j.at("ops"));
  EXPECT_EQ(loaded.last_json().at("collectives"), j.at("collectives"));
  std::string wider = plan;
  wider.replace(wider.find("--d-ff 64"), 9, "--d-ff 32");
  const auto other = run_app(wider + " --strategy-load " + dir + "/plan.json");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.output.find("does not fit: parameter"), std::string::npos) << other.output;

  // ZeRO-1 on dp=2: each rank keeps half the optimizer state.
  const auto dp2 = run_app(tiny(data) + " --plan-only --dp 2 --tp 1");
  const auto zero = run_app(tiny(data) + " --plan-only --dp 2 --tp 1 --zero 1");
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  EXPECT_DOUBLE_EQ(zero.last_json().at("memory_per_rank").at("optimizer_state").get<double>(),
                   dp2.last_json().at("memory_per_rank").at("optimizer_state").get<double>() / 2);

  const auto searched = run_app(tiny(data) + " --plan-only --devices 4");
  ASSERT_EQ(searched.exit_code, 0) << searched.output;
  EXPECT_EQ(searched.last_json().at("candidates").size(), 2u) << "tp 1 and 2 divide the 2 heads";

  const auto uneven = run_app(tiny(data) + " --plan-only --dp 1 --tp 3");
  EXPECT_EQ(uneven.exit_code, 1);
  EXPECT_NE(uneven.output.find("2 attention heads do not split among tp=3"), std::string::npos) << uneven.output;
}

// --tp 2 under troupe-launch trains like one process (losses 1e-5 over 10 steps, and the held-out
// loss, which runs on the weights gathered from the shards); dp2 x tp2 with ZeRO-1 on 4 processes
// trains like it too and saves a checkpoint, gathered whole, that one process and tp=2 both resume
// exactly as the uninterrupted run goes on; a strategy file saved by one run and loaded by another
// gives the same losses; what tensor parallelism and ZeRO-1 cannot run yet is refused clearly.
TEST(GptApp, TensorParallelEqualsOneProcessAndResumesUnderAnyLayout) {
  const std::string dir = test::fresh_dir("gpt_tp"), data = corpus_file(dir);
  const std::string common = " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --threads 1 --lr 3e-3 --eval-every 5"
                             " --val-batches 2 --amp O0 --clip 1 --data " + data;
  const std::string launch = std::string(TROUPE_LAUNCH_BIN) + " --timeout 30 -n ";
  const auto single = run_app(kGpt + common + " --batch 4 --steps 10 --metrics " + dir + "/single.csv");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto tp = run_app(launch + "2 -- " + kGpt + common + " --batch 4 --steps 10 --tp 2 --strategy-save " + dir +
                          "/plan.json --metrics " + dir + "/tp.csv");
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  EXPECT_NE(tp.output.find("[rank 1] troupe-gpt: tensor parallel: shard 1 of 2 (rank 1 of 2), plan tp=2: 8 all-reduces and 2 other"),
            std::string::npos) << tp.output;
  const auto expected = test::csv_column(dir + "/single.csv", "loss");
  const auto expect_losses = [&](const std::string& file, std::size_t from, std::size_t steps = 10) {
    const auto got = test::csv_column(file, "loss");
    ASSERT_EQ(got.size(), steps - from) << file;
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], expected[from + i], 1e-5 * std::abs(expected[from + i])) << file << ", step " << from + i + 1;
  };
  expect_losses(dir + "/tp.csv", 0);
  // The metrics measure the whole model's gradients: the ranks' shards add up (the replicated ones once).
  for (const char* column : {"grad_norm", "grad_variance"}) {
    const auto one = test::csv_column(dir + "/single.csv", column), two = test::csv_column(dir + "/tp.csv", column);
    ASSERT_EQ(one.size(), two.size());
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], one[i], 1e-4 * std::abs(one[i])) << column << ", step " << i + 1;
  }
  // Rank 0's final line of a launched run.
  const auto rank0 = [](const test::AppRun& r) {
    for (const auto& line : r.lines())
      if (line.rfind("[rank 0] {\"app\"", 0) == 0) return nlohmann::json::parse(line.substr(9));
    ADD_FAILURE() << "no final line from rank 0:\n" << r.output;
    return nlohmann::json::object();
  };
  const nlohmann::json tp_line = rank0(tp);
  EXPECT_NEAR(tp_line.at("val_loss").get<double>(), single.last_json().at("val_loss").get<double>(), 1e-5);
  // What a shard holds: of the 25504 parameters, the block's qkv (3072 + 96), attention projection
  // (1024), fc (2048 + 64) and MLP projection (2048) weights and the token embedding and head (256
  // x 32 each, by vocabulary rows) are split in two; AdamW keeps two moments of each element it
  // holds (and a step count per parameter, a learning rate).
  const double held = tp_line.at("held_parameter_bytes").get<double>();
  EXPECT_EQ(held, 4 * (25504 - (8352 + 2 * 8192) / 2));
  EXPECT_GE(tp_line.at("held_optimizer_bytes").get<double>(), 2 * held);
  EXPECT_LT(tp_line.at("held_optimizer_bytes").get<double>(), 2 * held + 1024);

  const auto loaded = run_app(launch + "2 -- " + kGpt + common + " --batch 4 --steps 10 --tp 2 --strategy-load " + dir +
                              "/plan.json --metrics " + dir + "/loaded.csv");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_EQ(test::csv_column(dir + "/loaded.csv", "loss"), test::csv_column(dir + "/tp.csv", "loss"));
  // Mixed precision: the shards' bf16 sums differ from one process's in the last bits only.
  const auto mixed_single = run_app(kGpt + common + " --batch 4 --steps 10 --amp O2 --metrics " + dir + "/mixed_single.csv");
  ASSERT_EQ(mixed_single.exit_code, 0) << mixed_single.output;
  const auto mixed = run_app(launch + "2 -- " + kGpt + common + " --batch 4 --steps 10 --tp 2 --amp O2 --metrics " + dir +
                             "/mixed.csv");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  const auto mixed_expected = test::csv_column(dir + "/mixed_single.csv", "loss"), mixed_got = test::csv_column(dir + "/mixed.csv", "loss");
  ASSERT_EQ(mixed_got.size(), mixed_expected.size());
  for (std::size_t i = 0; i < mixed_got.size(); ++i) EXPECT_NEAR(mixed_got[i], mixed_expected[i], 2e-3 * mixed_expected[i]) << "step " << i + 1;
  // Two micro-batches a step: the ranks' collectives meet in one order, and the step is the same.
  const auto micro = run_app(launch + "2 -- " + kGpt + common + " --batch 4 --steps 10 --tp 2 --micro-batches 2 --metrics " +
                             dir + "/micro.csv");
  ASSERT_EQ(micro.exit_code, 0) << micro.output;
  expect_losses(dir + "/micro.csv", 0);

  const auto hybrid = run_app(launch + "4 -- " + kGpt + common + " --batch 2 --steps 5 --dp 2 --tp 2 --zero 1 --save " + dir +
                              "/ck --comm-fusion-mb 0.01 --metrics " + dir + "/hybrid.csv");
  ASSERT_EQ(hybrid.exit_code, 0) << hybrid.output;
  EXPECT_NE(hybrid.output.find("[rank 3] troupe-gpt: data parallel: replica 1 of 2 (troupe-launch), per-replica batch 2, "
                               "global batch 4, fusion 0.01 MiB; ZeRO-1"), std::string::npos) << hybrid.output;
  expect_losses(dir + "/hybrid.csv", 0, 5);
  // ZeRO-1 on 2 replicas: each keeps half of its shards' optimizer state (up to the buckets' padding
  // and the pieces' step counts).
  const nlohmann::json hybrid_line = rank0(hybrid);
  EXPECT_EQ(hybrid_line.at("held_parameter_bytes").get<double>(), held);
  EXPECT_NEAR(hybrid_line.at("held_optimizer_bytes").get<double>(), held, 0.05 * held);
  EXPECT_EQ(hybrid.output.find("[rank 1] step 5: checkpoint saved"), std::string::npos) << "rank 0 alone writes it";
  const auto one = run_app(kGpt + common + " --steps 10 --resume " + dir + "/ck --metrics " + dir + "/one.csv");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  expect_losses(dir + "/one.csv", 5);
  const auto two = run_app(launch + "2 -- " + kGpt + common + " --steps 10 --tp 2 --resume " + dir + "/ck --metrics " + dir + "/two.csv");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  expect_losses(dir + "/two.csv", 5);

  test::expect_clear_failures({
      {kGpt + common + " --steps 1 --tp 2", "start it with troupe-launch -n 2"},
      {kGpt + common + " --steps 1 --strategy-load " + dir + "/plan.json", "give --tp too"},
      {kGpt + common + " --steps 1 --zero 1", "--zero 1 splits the optimizer state among the data-parallel replicas"},
      {kGpt + common + " --steps 10 --dp 3 --resume " + dir + "/ck", "does not split among 3 data-parallel replicas"},
  });
  // Under troupe-launch each rank prints its error on its prefixed line and the launcher stops the job.
  for (const auto& [ranks, flags, expect] :
       std::vector<std::tuple<int, std::string, std::string>>{
           {2, " --tp 2 --loss-scale dynamic", "--tp 2 trains without loss scaling so far"},
           {3, " --tp 3", "2 attention heads do not split among tp=3"}}) {
    const auto r = run_app(launch + std::to_string(ranks) + " -- " + kGpt + common + " --steps 1" + flags);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
  }
  const auto standard = run_app("GRAD_MODE=standard " + launch + "2 -- " + kGpt + common + " --steps 1 --dp 2 --zero 1");
  EXPECT_EQ(standard.exit_code, 1) << standard.output;
  EXPECT_NE(standard.output.find("--zero 1 runs on the actor runtime's overlapped gradient path"), std::string::npos)
      << standard.output;
}

// The most micro-batches a rank's --trace (its last step) has alive at once: each from its first
// op's kernels ("compute", a forward op's) to the end of its last op's (its backward's); the
// gradient stages adding it to the step's sums ("grad:" tracks) hold none of its activations.
int micro_batches_in_flight(const std::string& file) {
  std::ifstream in(file);
  const nlohmann::json trace = nlohmann::json::parse(in);
  const nlohmann::json& events = trace.is_object() ? trace.at("traceEvents") : trace;
  std::set<int> sums;  // the gradient stages' tracks
  for (const auto& e : events)
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name" &&
        e["args"].value("name", "").rfind("grad:", 0) == 0)
      sums.insert(e["tid"].get<int>());
  std::map<int, std::pair<double, double>> spans;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X" || e.value("name", "") != "compute" || !e.contains("args") ||
        !e["args"].contains("micro_batch") || sums.count(e["tid"].get<int>()))
      continue;
    const int mb = e["args"]["micro_batch"].get<int>();
    const double begin = e["ts"].get<double>(), end = begin + e["dur"].get<double>();
    const auto [it, fresh] = spans.emplace(mb, std::pair{begin, end});
    if (!fresh) it->second = {std::min(it->second.first, begin), std::max(it->second.second, end)};
  }
  std::vector<std::pair<double, int>> edges;  // (time, +1 begins / -1 ends), ends first at a tie
  for (const auto& [mb, span] : spans) {
    edges.emplace_back(span.first, 1);
    edges.emplace_back(span.second, -1);
  }
  std::sort(edges.begin(), edges.end());
  int alive = 0, most = 0;
  for (const auto& [time, change] : edges) most = std::max(most, alive += change);
  return most;
}

// Pipeline stages as processes (troupe-launch, UCX): two stages of one block each train like one
// process at the same global batch, metrics and held-out loss included, and so do tp 2 x pp 2;
// each rank holds its stage's parameters alone; a checkpoint saved by the stages resumes in one
// process and in dp 2 x pp 2 on four ranks, and one process's resumes on the stages.
TEST(GptApp, PipelineStagesEqualOneProcessAndResumeUnderAnyLayout) {
  const std::string dir = test::fresh_dir("gpt_pp"), data = corpus_file(dir);
  const std::string base = " --d-model 32 --layers 2 --heads 2 --d-ff 64 --seq 16 --threads 1 --lr 3e-3 --eval-every 5"
                           " --val-batches 2 --amp O0 --clip 1 --data " + data;
  const std::string common = base + " --micro-batches 4";
  const std::string launch = std::string(TROUPE_LAUNCH_BIN) + " --timeout 30 -n ";
  const auto single = run_app(kGpt + common + " --batch 4 --steps 10 --metrics " + dir + "/single.csv");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto piped = run_app(launch + "2 -- " + kGpt + common + " --batch 4 --steps 10 --pp 2 --metrics " + dir + "/pp.csv");
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_NE(piped.output.find("[rank 1] troupe-gpt: pipeline: stage 1 of 2 (rank 1 of 2), layers 1-1 of the split 1,1, "
                              "schedule 1f1b, 4 micro-batches"), std::string::npos) << piped.output;
  const auto expect_column = [&](const std::string& file, const char* column, std::size_t from, std::size_t steps = 10) {
    const auto want = test::csv_column(dir + "/single.csv", column), got = test::csv_column(file, column);
    ASSERT_EQ(got.size(), steps - from) << file;
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[from + i], 1e-5 * std::abs(want[from + i])) << file << " " << column << ", step " << from + i + 1;
  };
  for (const char* column : {"loss", "grad_norm", "grad_variance"}) expect_column(dir + "/pp.csv", column, 0);
  nlohmann::json line;
  for (const auto& l : piped.lines())
    if (l.rfind("[rank 1] {\"app\"", 0) == 0) line = nlohmann::json::parse(l.substr(9));
  ASSERT_FALSE(line.empty()) << piped.output;
  EXPECT_NEAR(line.at("val_loss").get<double>(), single.last_json().at("val_loss").get<double>(), 1e-5);
  EXPECT_EQ(line.at("pp").get<int>(), 2);
  // The last stage: block 1 (8544 parameters with its LayerNorms), the final LayerNorm and the head (256 x 32).
  EXPECT_EQ(line.at("held_parameter_bytes").get<double>(), 4 * (8544 + 64 + 8192));

  // Four ranks, tp 2 x pp 2: each stage's block split between two shards, the stages' sends and
  // receives between the shards of one index.
  const auto hybrid = run_app(launch + "4 -- " + kGpt + common + " --batch 4 --steps 10 --tp 2 --pp 2 --metrics " + dir +
                              "/hybrid.csv");
  ASSERT_EQ(hybrid.exit_code, 0) << hybrid.output;
  EXPECT_NE(hybrid.output.find("[rank 3] troupe-gpt: pipeline: stage 1 of 2 (rank 3 of 4)"), std::string::npos) << hybrid.output;
  EXPECT_NE(hybrid.output.find("[rank 3] troupe-gpt: tensor parallel: shard 1 of 2 (rank 3 of 4)"), std::string::npos)
      << hybrid.output;
  expect_column(dir + "/hybrid.csv", "loss", 0);

  const auto saved = run_app(launch + "2 -- " + kGpt + common + " --batch 4 --steps 5 --pp 2 --save " + dir + "/ck");
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const auto one = run_app(kGpt + common + " --steps 10 --resume " + dir + "/ck --metrics " + dir + "/one.csv");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  expect_column(dir + "/one.csv", "loss", 5);
  const auto four = run_app(launch + "4 -- " + kGpt + common + " --batch 2 --dp 2 --pp 2 --steps 10 --resume " + dir + "/ck"
                            " --metrics " + dir + "/four.csv");
  ASSERT_EQ(four.exit_code, 0) << four.output;
  expect_column(dir + "/four.csv", "loss", 5);
  const auto whole = run_app(kGpt + common + " --batch 4 --steps 5 --save " + dir + "/ck1");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto back = run_app(launch + "2 -- " + kGpt + common + " --pp 2 --steps 10 --resume " + dir + "/ck1 --metrics " + dir +
                            "/back.csv");
  ASSERT_EQ(back.exit_code, 0) << back.output;
  expect_column(dir + "/back.csv", "loss", 5);

  // The schedules from the registers, with 8 micro-batches: under 1F1B stage i has at most 2 - i
  // in flight, and one more by this count, which sees the ops that read no micro-batch input (the
  // position embedding's lookup) run ahead, and a micro-batch's last weight gradients beside the
  // next one's forward; under GPipe all 8 may be in flight, and are here.
  const auto in_flight = [&](const std::string& schedule) {
    const auto r = run_app(launch + "2 -- " + kGpt + base + " --batch 8 --micro-batches 8 --pp 2 --steps 2 --pp-schedule " +
                           schedule + " --trace " + dir + "/" + schedule + ".json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::pair{micro_batches_in_flight(dir + "/" + schedule + ".json"),
                     micro_batches_in_flight(dir + "/" + schedule + ".rank1.json")};
  };
  const auto [first, last] = in_flight("1f1b");
  EXPECT_LE(first, 2 + 1);
  EXPECT_LE(last, 1 + 1);
  EXPECT_GT(in_flight("gpipe").first, 2 + 1);
  const auto summary = run_app(std::string(TROUPE_TRACE_BIN) + " summary " + dir + "/1f1b.json " + dir + "/1f1b.rank1.json");
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_NE(summary.output.find("idle fraction of each trace (a pipeline stage's bubble):"), std::string::npos) << summary.output;

  // The plan of the stages (no training): each stage's share, the step they make, its bubble at
  // least the balanced (p - 1) / (m + p - 1), 1F1B's micro-batches in flight.
  const auto planned = run_app(kGpt + base + " --batch 4 --plan-only --pp 2 --micro-batches 4 --gflops 10 --update-gbps 10");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("troupe-gpt: pipeline dp=1 x tp=1 x pp=2 (1f1b, 4 micro-batches of 1 rows): predicted step"),
            std::string::npos) << planned.output;
  const nlohmann::json plan = planned.last_json();
  ASSERT_EQ(plan.at("stages").size(), 2u);
  EXPECT_GT(plan.at("predicted_ms").get<double>(), 0);
  EXPECT_GE(plan.at("bubble").get<double>(), 1.0 / 5 - 1e-9);
  EXPECT_EQ(plan.at("stages")[0].at("in_flight").get<int>(), 2);
  EXPECT_EQ(plan.at("stages")[1].at("in_flight").get<int>(), 1);

  test::expect_clear_failures({
      {kGpt + common + " --steps 1 --pp 2", "start it with troupe-launch -n 2"},
      {kGpt + common + " --steps 1 --pp-layers 1,1", "--pp-layers 1,1 gives 2 stages and --pp is 1"},
  });
  const auto uneven = run_app(launch + "2 -- " + kGpt + common + " --steps 1 --pp 2 --pp-layers 2,1");
  EXPECT_EQ(uneven.exit_code, 1) << uneven.output;
  EXPECT_NE(uneven.output.find("--pp-layers 2,1 adds up to 3 layers and the model has 2"), std::string::npos) << uneven.output;
}

// A launched job given neither --dp nor --tp asks the planner actor for its mesh: each rank
// measures its GFLOP/s, update bandwidth and the link, the ranks agree on their means and choose
// alike, and the run trains the global --batch exactly like one process, whichever mesh it is.
// Settings that rule tensor parallelism out (loss scaling) leave the job data parallel;
// a batch no mesh they allow splits, and a budget no mesh fits, are refused clearly.
TEST(GptApp, ALaunchedJobWithoutDpOrTpSearchesItsMesh) {
  const std::string dir = test::fresh_dir("gpt_search"), data = corpus_file(dir);
  const std::string common = " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --threads 1 --lr 3e-3 --eval-every 5"
                             " --val-batches 2 --amp O0 --clip 1 --steps 6 --data " + data;
  const std::string launch = std::string(TROUPE_LAUNCH_BIN) + " --timeout 30 -n 2 -- " + kGpt + common;
  const auto single = run_app(kGpt + common + " --batch 4 --metrics " + dir + "/single.csv");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto expected = test::csv_column(dir + "/single.csv", "loss");
  for (const auto& [flags, mesh] : std::vector<std::pair<std::string, std::string>>{
           {"", ""}, {" --loss-scale dynamic", "planner chose dp=2 x tp=1"}}) {
    const auto r = run_app(launch + " --batch 4" + flags + " --metrics " + dir + "/searched.csv");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("[rank 0] troupe-gpt: planning 2 ranks (no --dp, no --tp)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("[rank 0] troupe-gpt: planner chose dp="), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(mesh), std::string::npos) << r.output;
    const auto got = test::csv_column(dir + "/searched.csv", "loss");
    ASSERT_EQ(got.size(), expected.size()) << flags;
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * expected[i]) << flags << ", step " << i + 1;
  }
  for (const auto& [flags, expect] : std::vector<std::pair<std::string, std::string>>{
           {" --batch 3 --loss-scale dynamic", "planner: no mesh of 2 ranks splits the global batch of 3 among its replicas "
                                            "without tensor parallelism"},
           {" --batch 4 --mem-per-rank 1000", "planner: no mesh of 2 devices fits"}}) {
    const auto r = run_app(launch + flags);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
  }
}
