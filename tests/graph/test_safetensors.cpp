// safetensors: round trips of every dtype and a refused, clearly named error for each kind of bad file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "kernels/reference.hpp"
#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {
// A fresh folder under the system temp dir, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("troupe_st_" + std::to_string(::getpid()) + "_" +
                                                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// A file with the given JSON header and `data_bytes` zero bytes of data.
std::string file_with_header(const std::string& json, std::size_t data_bytes) {
  std::string out(8, '\0');
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + std::string(data_bytes, '\0');
}

void expect_refused(const std::string& bytes, const std::string& mention) {
  try {
    parse_safetensors(bytes, "model.safetensors");
    FAIL() << "expected the file to be refused (" << mention << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    for (char c : std::string(e.what())) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f) << e.what();
  }
}
}  // namespace

TEST(Safetensors, RoundTripKeepsValuesDtypesShapesAndMetadata) {
  TempDir dir;
  const std::string path = (dir.path / "w.safetensors").string();
  std::map<std::string, Tensor> tensors{
      {"a.weight", test::random_tensor({3, 4}, 1)},
      {"a.bias", test::random_tensor({4, 3}, 2).transpose(0, 1)},  // non-contiguous: written densely
      {"d", test::random_tensor({2}, 3).to(DType::f64)},
      {"ids", Tensor::from_vector<std::int64_t>({7, -1, 3}, {3})},
      {"h", test::random_tensor({5}, 4).to(DType::bf16)},
      {"half", test::random_tensor({2, 3}, 5).to(DType::f16)},
      {"empty", Tensor::zeros({0, 2})},
      {"scalar", Tensor::scalar(2.5)}};
  save_safetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});
  const SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const Tensor& r = f.tensors.at(name);
    EXPECT_EQ(r.dtype(), t.dtype()) << name;
    EXPECT_EQ(r.shape(), t.shape()) << name;
    EXPECT_EQ(test::values(r), test::values(t)) << name;
  }
  // The write is atomic: no temporary file is left next to it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator()), 1);
}

TEST(Safetensors, BadHeadersAreRefusedWithTheReason) {
  expect_refused("abc", "too short");
  expect_refused(file_with_header("{}", 0).substr(0, 9), "runs past the end");
  expect_refused(file_with_header("{not json", 0), "not valid JSON");
  expect_refused(file_with_header("[1, 2]", 0), "JSON object");
  expect_refused(file_with_header(R"({"w":{"dtype":"F32","shape":[2]}})", 8), "needs dtype, shape and data_offsets");
  expect_refused(file_with_header(R"({"w":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})", 16), "'C64'");
  expect_refused(file_with_header(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "0 to 2^63 - 1");
  expect_refused(file_with_header(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8), "0 to 2^63 - 1");
  expect_refused(file_with_header(R"({"w":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", 8),
                 "0 to 2^63 - 1");
  // Element counts and byte sizes that overflow 64 bits are refused, not wrapped onto a small buffer.
  expect_refused(file_with_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", 16),
                 "more elements than fit");
  expect_refused(file_with_header(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]}})", 16),
                 "more bytes than fit");
  expect_refused(file_with_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
                 "outside the data section");
  expect_refused(file_with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12");
  expect_refused(file_with_header(R"({"a\nb\u001b[2J":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 8),
                 "tensor 'a\\x0ab\\x1b[2J'");
  expect_refused(file_with_header(std::string("{\x7f"), 0), "not valid JSON");
}

TEST(Safetensors, MissingFilesAndFoldersNameThePath) {
  try {
    load_safetensors("/nonexistent/troupe/w.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/troupe/w.safetensors"), std::string::npos);
  }
  EXPECT_THROW(save_safetensors("/nonexistent/troupe/w.safetensors", {{"x", Tensor::zeros({1})}}), Error);
}
