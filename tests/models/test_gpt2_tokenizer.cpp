// GPT-2's byte-level BPE tokenizer (models/gpt2_tokenizer.hpp): the pieces and ids a reference
// encoder in Python gives on a vocabulary it learned (tests/golden/make_gpt2_tokenizer.py; Unicode text,
// whitespace runs, contractions, invalid UTF-8), byte-exact round trips on any bytes, the
// pre-tokenizer's pieces, and clear errors for broken files and unknown ids.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <sstream>

#include "gpt2_pretokenizer.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/gpt2_tokenizer.hpp"

using namespace troupe;
using troupe::models::Gpt2Tokenizer;

namespace {

const std::string kDir = std::string(TROUPE_TEST_DATA_DIR) + "/gpt2_tokenizer";

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : models::gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

TEST(Gpt2Tokenizer, EncodesAsThePythonReference) {
  const Gpt2Tokenizer tok = Gpt2Tokenizer::load(kDir);
  const nlohmann::json cases = nlohmann::json::parse(read(kDir + "/cases.json"));
  ASSERT_GE(cases["cases"].size(), 20u);
  for (const auto& c : cases["cases"]) {
    const std::string text = from_hex(c["hex"]);
    std::vector<std::string> expected_pieces;
    for (const auto& p : c["pieces"]) expected_pieces.push_back(from_hex(p));
    EXPECT_EQ(pieces(text), expected_pieces) << "text (hex) " << c["hex"];
    const std::vector<std::int64_t> expected = c["ids"].get<std::vector<std::int64_t>>();
    EXPECT_EQ(tok.encode(text), expected) << "text (hex) " << c["hex"];
    EXPECT_EQ(tok.decode(expected), text) << "text (hex) " << c["hex"];
  }
  ASSERT_TRUE(tok.end_of_text().has_value());
  EXPECT_EQ(*tok.end_of_text(), tok.vocab_size() - 1);
  EXPECT_EQ(tok.token_bytes(*tok.end_of_text()), "<|endoftext|>");
}

TEST(Gpt2Tokenizer, RoundTripsAnyBytes) {
  const Gpt2Tokenizer tok = Gpt2Tokenizer::load(kDir);
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet{"a", "b", " ", "  ", "\n", "\t", "'s", "'", "é", "中", "🙂", "1", "٣",
                                          "\xff", "\x80", "\xe2\x82", "\xc3", "\xed\xa0\x80", "\xa0", "\xc2\xa0"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    const std::vector<std::int64_t> ids = tok.encode(text);
    ASSERT_EQ(tok.decode(ids), text) << "trial " << trial;
    std::string streamed;
    for (std::int64_t id : ids) streamed += tok.token_bytes(id);
    EXPECT_EQ(streamed, text);
  }
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(tok.decode(tok.encode(all)), all);
}

TEST(Gpt2Pretokenizer, CutsAsGpt2sPattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("it's they're I'll"), (V{"it", "'s", " they", "'re", " I", "'ll"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"})) << "a space run leaves its last space to the next word";
  EXPECT_EQ(pieces("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("end   "), (V{"end", "   "})) << "trailing whitespace is one piece";
  EXPECT_EQ(pieces("x 123 !?"), (V{"x", " 123", " !?"}));
  EXPECT_EQ(pieces("naïve 中文"), (V{"naïve", " 中文"}));
  EXPECT_EQ(pieces("a\xff\xfe b"), (V{"a", "\xff\xfe", " b"})) << "invalid bytes are neither letters nor spaces";
  EXPECT_EQ(pieces("\xe2\x82 x"), (V{"\xe2\x82", " x"})) << "a cut-off sequence is its bytes";
  EXPECT_TRUE(pieces("").empty());
}

TEST(Gpt2Tokenizer, BrokenFilesAndUnknownIdsAreClearErrors) {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { Gpt2Tokenizer::load("/nonexistent-folder"); }).find("vocab.json"), std::string::npos);
  const std::string vocab = read(kDir + "/vocab.json"), merges = read(kDir + "/merges.txt");
  EXPECT_NE(message([&] { Gpt2Tokenizer("{not json", merges, "t"); }).find("t/vocab.json is not JSON"), std::string::npos);
  EXPECT_NE(message([&] { Gpt2Tokenizer(R"({"a": 0})", merges, "t"); }).find("no token for byte"), std::string::npos);
  EXPECT_NE(message([&] { Gpt2Tokenizer(vocab, "#version: 0.2\nh e\nbad-line\n", "t"); }).find("merges.txt line 3"),
            std::string::npos);
  // A merge whose result the vocabulary lacks is caught when a word needs it.
  const Gpt2Tokenizer mismatched(vocab, "#version: 0.2\nq z\n", "t");
  EXPECT_NE(message([&] { mismatched.encode("qz"); }).find("vocab.json does not have"), std::string::npos);
  const Gpt2Tokenizer tok = Gpt2Tokenizer::load(kDir);
  EXPECT_NE(message([&] { tok.decode({0, tok.vocab_size()}); }).find("token id"), std::string::npos);
  EXPECT_NE(message([&] { tok.decode({-1}); }).find("token id -1"), std::string::npos);
}

}  // namespace
