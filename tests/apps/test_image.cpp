// Image I/O, bicubic resampling, procedural images and PSNR (troupe/apps/image.hpp).
#include "troupe/apps/image.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "troupe/kernels/error.hpp"
#include "troupe/kernels/rng.hpp"

namespace troupe::apps {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, so parallel ctest runs never share files.
class TempDir {
 public:
  TempDir() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(testing::TempDir()) /
            ("troupe_image_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

Tensor random_image(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  gen.uniform_(t, 0.0, 1.0);
  return t;
}

// Runs `f`, expecting a troupe::Error of `kind` whose message contains `needle`.
template <class F>
void expect_error(F f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a troupe::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PngIo, RoundTripsANonSquareImage) {
  TempDir dir;
  const Tensor image = random_image({3, 17, 23}, 1);
  write_png(dir.file("a.png"), image);
  EXPECT_FALSE(fs::exists(dir.file("a.png.tmp")));
  const Tensor back = read_png(dir.file("a.png"));
  ASSERT_EQ(back.shape(), (Shape{3, 17, 23}));
  const std::vector<float> expected = image.to_vector<float>(), actual = back.to_vector<float>();
  for (std::size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(actual[i], expected[i], 0.5 / 255 + 1e-6) << i;
}

TEST(PngIo, WritesNonContiguousImagesAndClamps) {
  TempDir dir;
  Tensor hwc = random_image({5, 4, 3}, 2);
  hwc.data<float>()[0] = 7.0f;   // pixel (0,0) red, clamps to 1
  hwc.data<float>()[1] = -3.0f;  // pixel (0,0) green, clamps to 0
  const Tensor chw = hwc.permute({2, 0, 1});
  ASSERT_FALSE(chw.is_contiguous());
  write_png(dir.file("p.png"), chw);
  const Tensor back = read_png(dir.file("p.png"));
  ASSERT_EQ(back.shape(), (Shape{3, 5, 4}));
  const std::vector<float> expected = chw.contiguous().to_vector<float>(), actual = back.to_vector<float>();
  EXPECT_EQ(actual[0], 1.0f);
  EXPECT_EQ(actual[20], 0.0f);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (i == 0 || i == 20) continue;
    ASSERT_NEAR(actual[i], expected[i], 0.5 / 255 + 1e-6) << i;
  }
}

TEST(PngIo, WriteIntoMissingFolderNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("no/such/folder/x.png");
  expect_error([&] { write_png(path, random_image({3, 2, 2}, 3)); }, ErrorKind::io, path);
}

TEST(PngIo, ReadErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.file("missing.png");
  expect_error([&] { read_png(missing); }, ErrorKind::io, missing);

  const std::string text = dir.file("x.png");
  std::ofstream(text) << "this is not an image\n";
  expect_error([&] { read_png(text); }, ErrorKind::io, text);
  expect_error([&] { read_png(text); }, ErrorKind::io, "not a PNG");

  const std::string truncated = dir.file("truncated.png");
  write_png(truncated, random_image({3, 40, 40}, 4));
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  expect_error([&] { read_png(truncated); }, ErrorKind::io, truncated);
}

// A header declaring 544512 x 65542 pixels on a few hundred bytes (found by the fuzzer: it used to
// allocate gigabytes and take 16 s before failing) is refused at once as damaged.
TEST(PngIo, HeadersDeclaringMorePixelsThanTheFileHoldsAreRefused) {
  TempDir dir;
  const std::string path = dir.file("bomb.png");
  write_png(path, random_image({3, 4, 4}, 5));
  std::ifstream in(path, std::ios::binary);
  std::string png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(png.substr(12, 4), "IHDR");
  const unsigned char size[8] = {0x00, 0x08, 0x4f, 0x00, 0x00, 0x01, 0x00, 0x06};  // width, height (big-endian)
  for (int i = 0; i < 8; ++i) png[16 + static_cast<std::size_t>(i)] = static_cast<char>(size[i]);
  std::uint32_t crc = static_cast<std::uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17));
  for (int i = 3; i >= 0; --i, crc >>= 8) png[29 + static_cast<std::size_t>(i)] = static_cast<char>(crc & 0xff);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << png;
  expect_error([&] { read_png(path); }, ErrorKind::io, "declares 544512x65542 pixels, more than its");
}

// PNG bytes in memory (an upload, a response body): the same pixels as the file round trip, the
// file's own bytes decode, a size limit refuses a larger image before decoding it, and bad bytes
// give one error naming their source.
TEST(PngIo, EncodesAndDecodesInMemory) {
  TempDir dir;
  const Tensor image = random_image({3, 9, 14}, 6);
  const std::string bytes = encode_png(image);
  const Tensor back = decode_png(bytes, "the upload");
  ASSERT_EQ(back.shape(), (Shape{3, 9, 14}));
  write_png(dir.file("m.png"), image);
  EXPECT_EQ(back.to_vector<float>(), read_png(dir.file("m.png")).to_vector<float>());
  std::ifstream in(dir.file("m.png"), std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), bytes);
  EXPECT_EQ(decode_png(bytes, "the upload", 9 * 14).shape(), (Shape{3, 9, 14}));
  expect_error([&] { decode_png(bytes, "the upload", 9 * 14 - 1); }, ErrorKind::invalid_argument,
               "the upload is 14x9 pixels, more than the limit of 125");
  expect_error([&] { decode_png("GIF89a", "the upload"); }, ErrorKind::io, "the upload is not a PNG file");
  expect_error([&] { decode_png(bytes.substr(0, bytes.size() / 2), "the upload"); }, ErrorKind::io,
               "cannot decode the upload");
  expect_error([&] { encode_png(random_image({4, 2, 2}, 7)); }, ErrorKind::shape_mismatch, "encode_png: expected");
}

TEST(PngIo, ListsPngFilesSorted) {
  TempDir dir;
  expect_error([&] { list_png_files(dir.str()); }, ErrorKind::io, dir.str());
  expect_error([&] { list_png_files(dir.file("nope")); }, ErrorKind::io, dir.file("nope"));
  std::ofstream(dir.file("b.png")) << "b";
  std::ofstream(dir.file("a.PNG")) << "a";
  std::ofstream(dir.file("c.txt")) << "c";
  EXPECT_EQ(list_png_files(dir.str()), (std::vector<std::string>{dir.file("a.PNG"), dir.file("b.png")}));
}

TEST(ResizeBicubic, KeepsConstantImagesConstant) {
  const Tensor image = Tensor::full({3, 12, 10}, 0.37);
  for (auto [h, w] : {std::pair<std::int64_t, std::int64_t>{24, 20}, {6, 5}, {5, 17}, {1, 1}}) {
    const Tensor out = resize_bicubic(image, h, w);
    ASSERT_EQ(out.shape(), (Shape{3, h, w}));
    for (float v : out.to_vector<float>()) ASSERT_NEAR(v, 0.37, 1e-6) << h << "x" << w;
  }
}

TEST(ResizeBicubic, DownsamplingAntialiasesACheckerboard) {
  Tensor image = Tensor::empty({3, 32, 32});
  float* p = image.data<float>();
  for (std::int64_t c = 0; c < 3; ++c)
    for (std::int64_t y = 0; y < 32; ++y)
      for (std::int64_t x = 0; x < 32; ++x) p[(c * 32 + y) * 32 + x] = static_cast<float>((x + y) % 2);
  const Tensor out = resize_bicubic(image, 16, 16);
  ASSERT_EQ(out.shape(), (Shape{3, 16, 16}));
  const float* q = out.data<float>();
  // Point sampling would give 0 or 1; a low-pass filter gives the mean. Away from the clamped edges:
  for (std::int64_t c = 0; c < 3; ++c)
    for (std::int64_t y = 2; y < 14; ++y)
      for (std::int64_t x = 2; x < 14; ++x) ASSERT_NEAR(q[(c * 16 + y) * 16 + x], 0.5, 1e-5) << y << "," << x;
}

TEST(ResizeBicubic, UpsamplingReproducesALinearRamp) {
  const std::int64_t w = 16;
  Tensor image = Tensor::empty({3, 4, w});
  float* p = image.data<float>();
  for (std::int64_t i = 0; i < 3 * 4; ++i)
    for (std::int64_t x = 0; x < w; ++x) p[i * w + x] = 0.1f + 0.05f * static_cast<float>(x);
  const Tensor out = resize_bicubic(image, 4, 2 * w);
  const float* q = out.data<float>();
  // Output pixel x sits at input coordinate (x + 0.5) / 2 - 0.5; the ramp there is the exact answer.
  for (std::int64_t i = 0; i < 3 * 4; ++i) {
    for (std::int64_t x = 4; x < 2 * w - 4; ++x) {
      const double at = (x + 0.5) / 2.0 - 0.5;
      ASSERT_NEAR(q[i * 2 * w + x], 0.1 + 0.05 * at, 1e-5) << x;
    }
  }
}

TEST(ResizeBicubic, ShapesOfBatchesAndBadSizes) {
  const Tensor batch = random_image({4, 3, 128, 128}, 5);
  const Tensor out = resize_bicubic(batch, 64, 64);
  EXPECT_EQ(out.shape(), (Shape{4, 3, 64, 64}));
  // Each image of a batch is resampled on its own.
  const Tensor second = resize_bicubic(batch.slice(0, 1, 2).squeeze(0), 64, 64);
  const std::vector<float> a = out.slice(0, 1, 2).contiguous().to_vector<float>(), b = second.to_vector<float>();
  EXPECT_EQ(a, b);
  EXPECT_EQ(resize_bicubic(batch.slice(0, 0, 1).squeeze(0), 40, 200).shape(), (Shape{3, 40, 200}));
  EXPECT_THROW(resize_bicubic(batch, 0, 64), Error);
  EXPECT_THROW(resize_bicubic(batch, 64, -1), Error);
}

TEST(ProceduralImage, IsDeterministicVariedAndDetailed) {
  const Tensor a = procedural_image(42, 64, 96);
  ASSERT_EQ(a.shape(), (Shape{3, 64, 96}));
  const std::vector<float> va = a.to_vector<float>();
  EXPECT_EQ(va, procedural_image(42, 64, 96).to_vector<float>());
  EXPECT_NE(va, procedural_image(43, 64, 96).to_vector<float>());

  double sum = 0.0, sum2 = 0.0, max_step = 0.0;
  for (float v : va) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LE(v, 1.0f);
    sum += v;
    sum2 += static_cast<double>(v) * v;
  }
  for (std::size_t i = 1; i < va.size(); ++i) {
    if (i % 96 != 0) max_step = std::max(max_step, std::abs(static_cast<double>(va[i]) - va[i - 1]));
  }
  const double mean = sum / va.size();
  EXPECT_GT(std::sqrt(sum2 / va.size() - mean * mean), 0.05);
  EXPECT_GT(max_step, 0.3);
  // Downsampling must lose detail, or the image would teach super-resolution nothing.
  const Tensor round_trip = resize_bicubic(resize_bicubic(a, 32, 48), 64, 96);
  EXPECT_LT(psnr(a, round_trip), 35.0);
}

TEST(ProceduralImage, SeedsGiveDifferentImages) {
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    EXPECT_LT(psnr(procedural_image(seed, 48, 48), procedural_image(seed + 100, 48, 48)), 20.0) << seed;
  }
}

TEST(Psnr, KnownValues) {
  const Tensor a = random_image({3, 8, 9}, 6);
  EXPECT_EQ(psnr(a, a), std::numeric_limits<double>::infinity());
  EXPECT_NEAR(psnr(Tensor::zeros({2, 3, 8, 8}), Tensor::full({2, 3, 8, 8}, 0.1)), 20.0, 1e-6);
  // Values outside [0, 1] are clamped first: 1.5 counts as 1.
  EXPECT_NEAR(psnr(Tensor::full({3, 4, 4}, 1.5), Tensor::full({3, 4, 4}, 0.9)), 20.0, 1e-5);
}

TEST(Psnr, BorderCropsEachSide) {
  Tensor a = Tensor::zeros({3, 10, 10});
  Tensor b = Tensor::full({3, 10, 10}, 0.1);
  // Equal inside a 2-pixel frame: with the frame cropped the images are identical.
  float* p = b.data<float>();
  for (std::int64_t c = 0; c < 3; ++c)
    for (std::int64_t y = 2; y < 8; ++y)
      for (std::int64_t x = 2; x < 8; ++x) p[(c * 10 + y) * 10 + x] = 0.0f;
  EXPECT_EQ(psnr(a, b, 2), std::numeric_limits<double>::infinity());
  EXPECT_LT(psnr(a, b, 1), 30.0);
  EXPECT_THROW(psnr(a, b, 5), Error);
}

TEST(Psnr, MismatchedShapesNameBoth) {
  expect_error([] { psnr(Tensor::zeros({3, 4, 5}), Tensor::zeros({3, 5, 4})); }, ErrorKind::shape_mismatch,
               "[3, 4, 5]");
  expect_error([] { psnr(Tensor::zeros({3, 4, 5}), Tensor::zeros({3, 5, 4})); }, ErrorKind::shape_mismatch,
               "[3, 5, 4]");
}

}  // namespace
}  // namespace troupe::apps
