// troupe-sr as a user runs it: a tiny model trains on procedural images and on a PNG folder (loss
// falls, PSNR is reported next to bicubic, the JSON line parses), resume equals an uninterrupted
// run, infer doubles an image's size, and bad data gives one clear line and exit 1.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "apps/app_runner.hpp"
#include "kernels/reference.hpp"
#include "troupe/apps/image.hpp"
#include "troupe/apps/sr_data.hpp"
#include "troupe/graph/safetensors.hpp"
#include "troupe/models/sr_lite.hpp"

using namespace troupe;
using test::run_app;

namespace {
const std::string kSr = TROUPE_SR_BIN;

std::string tiny() {
  return kSr + " --channels 8 --blocks 1 --patch 32 --batch 2 --held-out 2 --threads 1 --lr 3e-3 --eval-every 3 --amp O0";
}

// A folder of `n` procedural PNGs of 48x40 pixels.
std::string png_folder(const std::string& dir, int n) {
  const std::string folder = dir + "/images";
  std::filesystem::create_directories(folder);
  for (int i = 0; i < n; ++i) apps::write_png(folder + "/img" + std::to_string(i) + ".png", apps::procedural_image(100 + i, 40, 48));
  return folder;
}
}  // namespace

TEST(SrApp, TrainsOnProceduralImagesAndReportsPsnr) {
  const std::string dir = test::fresh_dir("sr_smoke");
  const auto r = run_app(tiny() + " --steps 9 --metrics " + dir + "/m.csv");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GRAD_MODE=advanced"), std::string::npos);
  const auto j = r.last_json();
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j.at("app"), "troupe-sr");
  EXPECT_EQ(j.at("steps"), 9);
  EXPECT_GT(j.at("bicubic_psnr").get<double>(), 10);
  EXPECT_GT(j.at("val_psnr").get<double>(), 0);
  const auto loss = test::csv_column(dir + "/m.csv", "loss");
  ASSERT_EQ(loss.size(), 9u);
  EXPECT_LT(loss.back(), loss.front()) << "the loss did not fall";
  const auto psnr = test::csv_column(dir + "/m.csv", "val_psnr");
  EXPECT_GT(psnr[8], psnr[2]) << "held-out PSNR did not improve";
}

// Eager (JIT_LEVEL 0), traced as written (1) and optimised (3) train alike: 20 steps' losses
// within 1e-5.
TEST(SrApp, EagerStepsEqualActorStepsAtEveryLevel) {
  const std::string dir = test::fresh_dir("sr_levels");
  std::vector<std::vector<double>> losses;
  for (const char* level : {"0", "1", "3"}) {
    const std::string csv = dir + "/level" + level + ".csv";
    const auto r = run_app(std::string("JIT_LEVEL=") + level + " " + tiny() + " --steps 20 --metrics " + csv);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    losses.push_back(test::csv_column(csv, "loss"));
    ASSERT_EQ(losses.back().size(), 20u) << "level " << level;
  }
  for (std::size_t k = 1; k < losses.size(); ++k)
    for (std::size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[k][i], losses[0][i], 1e-5 * std::abs(losses[0][i])) << "run " << k << ", step " << i + 1;
}

TEST(SrApp, GradModeStandardUsesThePlainGradient) {
  const auto r = run_app("GRAD_MODE=standard " + tiny() + " --steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GRAD_MODE=standard (custom-relu trains with the plain relu gradient)"), std::string::npos)
      << r.output;
}

TEST(SrApp, ResumeEqualsAnUninterruptedRunAndInferUpscales) {
  const std::string dir = test::fresh_dir("sr_resume");
  ASSERT_EQ(run_app(tiny() + " --steps 6 --metrics " + dir + "/full.csv").exit_code, 0);
  ASSERT_EQ(run_app(tiny() + " --steps 3 --save " + dir + "/ck --metrics " + dir + "/parts.csv").exit_code, 0);
  const auto second = run_app(tiny() + " --steps 6 --save " + dir + "/ck --resume " + dir + "/ck --metrics " + dir + "/parts.csv");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto full = test::csv_column(dir + "/full.csv", "loss"), parts = test::csv_column(dir + "/parts.csv", "loss");
  ASSERT_EQ(parts.size(), full.size());
  for (std::size_t i = 0; i < full.size(); ++i) EXPECT_NEAR(parts[i], full[i], 1e-6 * std::abs(full[i])) << "step " << i + 1;

  apps::write_png(dir + "/in.png", apps::procedural_image(7, 24, 30));
  const auto r = run_app(kSr + " infer --weights " + dir + "/ck " + dir + "/in.png " + dir + "/out.png");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tensor out = apps::read_png(dir + "/out.png");
  EXPECT_EQ(out.shape(), (Shape{3, 48, 60}));
  EXPECT_NE(r.output.find("MiB peak measured"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MiB planned"), std::string::npos) << r.output;
  // The traced and optimised upscaling (JIT_LEVEL 3, the default, above) equals the eager one, to
  // one 8-bit step: level 3 may pick Winograd convolutions, which round differently (~1e-6), so a
  // pixel right at a rounding boundary may land one step away.
  const auto eager = run_app("JIT_LEVEL=0 " + kSr + " infer --weights " + dir + "/ck " + dir + "/in.png " + dir + "/eager.png");
  ASSERT_EQ(eager.exit_code, 0) << eager.output;
  const auto e = test::values(apps::read_png(dir + "/eager.png")), o = test::values(out);
  ASSERT_EQ(e.size(), o.size());
  for (std::size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(o[i], e[i], 1.0 / 255 + 1e-6) << "pixel value " << i;
  // --amp O1 runs the convolutions in bf16, O3 every op: the image stays within a few 8-bit steps
  // of f32's.
  for (const std::string level : {"O1", "O3"}) {
    const auto low = run_app(kSr + " infer --amp " + level + " --weights " + dir + "/ck " + dir + "/in.png " + dir + "/low.png");
    ASSERT_EQ(low.exit_code, 0) << low.output;
    const auto l = test::values(apps::read_png(dir + "/low.png"));
    double worst = 0;
    for (std::size_t i = 0; i < e.size(); ++i) worst = std::max(worst, std::abs(l[i] - e[i]));
    EXPECT_LE(worst, 4.0 / 255 + 1e-6) << level;
  }
}

// --dp 2 under troupe-launch: each replica takes half of the global batch and the run trains like
// one process at that batch; its checkpoint (the global batch in it) resumes in one process.
TEST(SrApp, DataParallelTrainsLikeOneProcessAndResumesInOne) {
  const std::string dir = test::fresh_dir("sr_dp");
  const std::string common = kSr + " --channels 8 --blocks 1 --patch 32 --held-out 2 --threads 1 --lr 3e-3 --amp O0 --clip 0.5";
  ASSERT_EQ(run_app(common + " --batch 4 --steps 6 --metrics " + dir + "/single.csv").exit_code, 0);
  const auto dp = run_app(std::string(TROUPE_LAUNCH_BIN) + " --timeout 30 -n 2 -- " + common + " --batch 2 --dp 2 --steps 3 --save " +
                          dir + "/ck --metrics " + dir + "/parts.csv");
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  EXPECT_NE(dp.output.find("data parallel: replica 1 of 2"), std::string::npos) << dp.output;
  const auto rest = run_app(common + " --steps 6 --resume " + dir + "/ck --metrics " + dir + "/parts.csv");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const auto single = test::csv_column(dir + "/single.csv", "loss"), parts = test::csv_column(dir + "/parts.csv", "loss");
  ASSERT_EQ(parts.size(), single.size());
  for (std::size_t i = 0; i < single.size(); ++i) EXPECT_NEAR(parts[i], single[i], 1e-5 * std::abs(single[i])) << "step " << i + 1;
}

TEST(SrApp, TrainsOnAPngFolder) {
  const std::string dir = test::fresh_dir("sr_folder");
  const auto r = run_app(tiny() + " --steps 2 --data " + png_folder(dir, 3));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 PNG files"), std::string::npos) << r.output;
  EXPECT_TRUE(r.last_json().is_object());
}

TEST(SrApp, BadDataGivesOneClearLine) {
  const std::string dir = test::fresh_dir("sr_bad");
  const std::string not_png = dir + "/not_png", corrupt = dir + "/corrupt", single = dir + "/single", small = dir + "/small";
  for (const auto& d : {not_png, corrupt, single, small}) std::filesystem::create_directories(d);
  apps::write_png(not_png + "/a.png", apps::procedural_image(1, 40, 40));
  std::ofstream(not_png + "/b.png") << "this is text, not an image";
  apps::write_png(corrupt + "/a.png", apps::procedural_image(1, 40, 40));
  apps::write_png(corrupt + "/b.png", apps::procedural_image(2, 40, 40));
  std::filesystem::resize_file(corrupt + "/b.png", std::filesystem::file_size(corrupt + "/b.png") / 2);
  apps::write_png(single + "/a.png", apps::procedural_image(1, 40, 40));
  apps::write_png(small + "/a.png", apps::procedural_image(1, 16, 16));
  apps::write_png(small + "/b.png", apps::procedural_image(2, 40, 40));
  test::expect_clear_failures({
      {tiny() + " --steps 1 --data " + dir + "/missing", "missing"},
      {tiny() + " --steps 1 --data " + not_png, "b.png' is not a PNG"},
      {tiny() + " --steps 1 --data " + corrupt, "b.png"},
      {tiny() + " --steps 1 --data " + single, "at least 2"},
      {tiny() + " --steps 1 --data " + small, "smaller than a training patch"},
      {tiny() + " --steps 1 --act swish", "--act 'swish'"},
      {kSr + " --steps 1 --patch 33", "--patch 33"},
      {kSr + " infer --weights " + dir + "/none.safetensors " + dir + "/in.png " + dir + "/out.png", "none.safetensors"},
      {kSr + " infer in.png", "--weights"},
      {tiny() + " --steps 1 --held-out 0", "--held-out: must be from 1 to 10000, got 0"},
      {kSr + " --steps 1 --batch 0", "--batch: must be from 1"},
      {kSr + " --steps 1 --channels 0", "--channels: must be from 1 to 4096"},
      {kSr + " infer --weights " + dir + " " + dir + "/in.png " + dir + "/out.png", "holds no checkpoint"},
  });
}

// Sizes that cannot fit are refused up front, saying how much memory they would need (before,
// --patch 100000 aborted on an uncaught std::bad_alloc); an allocation that fails anyway (here
// under a 600 MB address-space limit, where a 32-pixel run trains) is one line, not an abort.
TEST(SrApp, ImpossibleSizesAreRefusedWithTheMemoryNeeded) {
  test::expect_clear_failures({
      {kSr + " --steps 1 --patch 100000", "--patch 100000 --batch 4 --channels 64 --blocks 4 would need at least"},
      {kSr + " --steps 1 --batch 1000000 --patch 1024", "more than this machine's"},
  });
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // sanitizers reserve terabytes of address space
  const std::string small = " --batch 1 --held-out 1 --channels 1 --blocks 0 --steps 1 --threads 1";
  test::expect_clear_failures({{"ulimit -v 600000; " + kSr + " --patch 8192" + small, "troupe-sr: out of memory; use smaller sizes"}});
  EXPECT_EQ(run_app("ulimit -v 600000; " + kSr + " --patch 32" + small).exit_code, 0);
#endif
}

// A resumed run says which settings come from the checkpoint, refuses flags that contradict them
// and honours a new --lr (before, it silently replaced --act, --data, --seed, --batch and --patch
// and ignored --lr).
TEST(SrApp, ResumeTakesItsSettingsFromTheCheckpoint) {
  const std::string dir = test::fresh_dir("sr_resume_flags"), ck = dir + "/ck";
  ASSERT_EQ(run_app(tiny() + " --act relu --seed 5 --steps 2 --save " + ck).exit_code, 0);
  const std::string resume = kSr + " --threads 1 --eval-every 0 --steps 4 --resume " + ck;
  const auto kept = run_app(resume + " --metrics " + dir + "/kept.csv");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_NE(kept.output.find("from the checkpoint: --channels 8, --blocks 1, --act relu, --data (default), --seed 5, "
                             "--batch 2, --patch 32, --lr 0.003"),
            std::string::npos)
      << kept.output;
  const auto changed = run_app(resume + " --lr 1e-5 --metrics " + dir + "/changed.csv");
  ASSERT_EQ(changed.exit_code, 0) << changed.output;
  EXPECT_NE(changed.output.find("from the flags: --lr 1e-05 (the checkpoint had 0.003)"), std::string::npos) << changed.output;
  // Step 3 is the same (same weights, same batch); step 4 shows the smaller learning rate of step 3's update.
  const auto a = test::csv_column(dir + "/kept.csv", "loss"), b = test::csv_column(dir + "/changed.csv", "loss");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NEAR(a[0], b[0], 1e-6 * a[0]);
  EXPECT_GT(std::abs(a[1] - b[1]), 1e-4 * a[1]);
  const std::string state = ck + "/step-00000002/state.json";
  test::expect_clear_failures({
      {resume + " --act custom-relu", "--act custom-relu contradicts the checkpoint '" + state + "' (act relu); drop --act"},
      {resume + " --seed 1", "--seed 1 contradicts"},
      {resume + " --batch 4", "--batch 4 contradicts"},
      {resume + " --patch 64", "--patch 64 contradicts"},
      {resume + " --data " + dir, "--data " + dir + " contradicts"},
      {resume + " --channels 16", "--channels 16 contradicts"},
      {kSr + " infer --weights " + ck + " --blocks 3 in.png out.png", "--blocks 3 contradicts the checkpoint '" + state + "'"},
  });
}

// --load-weights reads a safetensors file with the documented names, strictly; errors name the file.
TEST(SrApp, LoadsWeightsFromSafetensors) {
  const std::string dir = test::fresh_dir("sr_weights");
  models::SrConfig config;
  config.channels = 8;
  config.blocks = 1;
  Generator gen(3);
  models::SrLite model(config, gen);
  std::map<std::string, Tensor> zeros;
  for (const auto& [name, t] : model.state_dict()) zeros[name] = Tensor::zeros(t.shape());
  graph::save_safetensors(dir + "/zeros.safetensors", zeros);
  // All-zero weights predict zeros, so the first loss is the mean square of the first targets.
  const auto r = run_app(tiny() + " --steps 1 --metrics " + dir + "/m.csv --load-weights " + dir + "/zeros.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  apps::SrDataOptions o;
  o.patch = 32;
  o.batch = 2;
  o.held_out = 2;
  const Tensor hr = apps::SrData(o).next().second;
  double sum = 0;
  for (float v : hr.to_vector<float>()) sum += static_cast<double>(v) * v;
  const auto loss = test::csv_column(dir + "/m.csv", "loss");
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_NEAR(loss[0], sum / static_cast<double>(hr.numel()), 1e-5 * loss[0]);
  std::map<std::string, Tensor> extra = zeros;
  extra["body.1.conv1.weight"] = Tensor::zeros({8, 8, 3, 3});
  graph::save_safetensors(dir + "/extra.safetensors", extra);
  test::expect_clear_failures({
      {kSr + " --channels 16 --blocks 1 --patch 32 --batch 2 --steps 1 --load-weights " + dir + "/zeros.safetensors",
       "'" + dir + "/zeros.safetensors' does not fit the model: load_state_dict: parameter"},
      {tiny() + " --steps 1 --load-weights " + dir + "/extra.safetensors", "unexpected entries: body.1.conv1.weight"},
      {tiny() + " --steps 1 --load-weights " + dir, "is a folder; --load-weights takes a .safetensors file"},
      {tiny() + " --steps 1 --load-weights " + dir + "/none.safetensors", "none.safetensors' does not exist"},
  });
}
