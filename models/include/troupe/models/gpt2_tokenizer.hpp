#pragma once
// GPT-2's byte-level BPE tokenizer, from the two files Hugging Face keeps beside a GPT-2 checkpoint:
// vocab.json (token -> id, tokens spelled in GPT-2's printable stand-ins for bytes) and merges.txt
// (the merges in rank order). Any byte string encodes, valid UTF-8 or not, and decodes back to
// the same bytes.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::models {

/// Encodes text to GPT-2 token ids and decodes ids to bytes. Thread-safe once loaded.
class Gpt2Tokenizer {
 public:
  /// Reads `dir`/vocab.json and `dir`/merges.txt; an error names the file, the line and what is wrong.
  static Gpt2Tokenizer load(const std::string& dir);
  /// From the two files' contents (`source` names them in errors).
  Gpt2Tokenizer(const std::string& vocab_json, const std::string& merges_txt, const std::string& source = "tokenizer");

  /// The ids of `text`: cut as GPT-2's pre-tokenizer cuts it, each piece merged by rank.
  std::vector<std::int64_t> encode(std::string_view text) const;
  /// The bytes of `ids`; an id outside the vocabulary is an error naming it.
  std::string decode(const std::vector<std::int64_t>& ids) const;
  /// The bytes of one token (a streamed token may be part of a UTF-8 character).
  std::string token_bytes(std::int64_t id) const;
  /// Tokens in the vocabulary (its largest id + 1).
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(tokens_.size()); }
  /// The id of "<|endoftext|>", if the vocabulary has it.
  std::optional<std::int64_t> end_of_text() const;

 private:
  // The ids of one pre-tokenized piece (BPE over its bytes), cached per piece.
  std::vector<std::int64_t> encode_piece(std::string_view piece) const;

  std::unordered_map<std::string, std::int64_t> ids_;       // token (stand-in spelling) -> id
  std::vector<std::string> tokens_;                          // id -> token bytes (decoded)
  std::map<std::pair<std::string, std::string>, int> ranks_;  // merge -> rank
  std::string source_;
  struct Cache;
  std::shared_ptr<Cache> cache_;  // pieces seen before (encode is const and may run on many threads)
};

}  // namespace troupe::models
