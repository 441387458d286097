// troupe-sr as a user runs it: a tiny model trains on procedural images and on a PNG folder (loss
// falls, PSNR is reported next to bicubic, the JSON line parses), resume equals an uninterrupted
// run, infer doubles an image's size, and bad data gives one clear line and exit 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "apps/app_runner.hpp"
#include "troupe/apps/image.hpp"

using namespace troupe;
using test::run_app;

namespace {
const std::string kSr = TROUPE_SR_BIN;

std::string tiny() {
  return kSr + " --channels 8 --blocks 1 --patch 32 --batch 2 --held-out 2 --threads 1 --lr 3e-3 --eval-every 3";
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
  });
}
