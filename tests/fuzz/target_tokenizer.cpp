// GPT-2's tokenizer on outside bytes: with an even first byte the rest is text, which the test
// vocabulary must encode and decode back to the same bytes; with an odd one the rest is a
// vocab.json and a merges.txt (split at the first NUL) to load, then encode a sentence with.
#include <stdexcept>

#include "fuzz/files.hpp"
#include "fuzz/targets.hpp"
#include "troupe/models/gpt2_tokenizer.hpp"

namespace troupe::fuzz {

FuzzTarget tokenizer_target(const std::string&) {
  const std::string dir = std::string(TROUPE_TEST_DATA_DIR) + "/gpt2_tokenizer";
  const std::string vocab = read_bytes(dir + "/vocab.json"), merges = read_bytes(dir + "/merges.txt");
  auto tokenizer = std::make_shared<models::Gpt2Tokenizer>(vocab, merges, "fuzz");
  FuzzTarget t;
  t.name = "tokenizer";
  t.seeds = {std::string(1, '\0') + "Hello, world! It's 2026: naïve café, 中文 🙂\n\n  end",
             std::string(1, '\0') + "\xff\xfe\x80 \xe2\x82 ok", std::string(1, '\x01') + vocab + '\0' + merges,
             std::string(1, '\x01') + vocab + '\0' + "#version: 0.2\nh e\n"};
  t.dictionary = {"#version: 0.2\n", "\"<|endoftext|>\": ", "'s", " \xc4\xa0", "\\u0120", "\n"};
  t.run = [tokenizer](const std::string& input) {
    if (input.empty()) return std::string("empty");
    if (static_cast<unsigned char>(input[0]) % 2 == 0) {
      const std::string text = input.substr(1);
      if (tokenizer->decode(tokenizer->encode(text)) != text) throw std::logic_error("the round trip changed the bytes");
      return std::string("round trip");
    }
    const std::string files = input.substr(1);
    const std::size_t nul = files.find('\0');
    if (nul == std::string::npos) return std::string("no NUL between the files");
    const models::Gpt2Tokenizer loaded(files.substr(0, nul), files.substr(nul + 1), "fuzz");
    const std::vector<std::int64_t> ids = loaded.encode("the tokenizer's test, 42 times");
    return std::string(loaded.decode(ids) == "the tokenizer's test, 42 times" ? "loaded" : "loaded, lossy");
  };
  return t;
}

}  // namespace troupe::fuzz
