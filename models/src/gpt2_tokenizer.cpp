#include "troupe/models/gpt2_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <limits>
#include <mutex>
#include <sstream>

#include "gpt2_pretokenizer.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/weights.hpp"

namespace troupe::models {

namespace {

// code point -> UTF-8
std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// GPT-2's printable stand-in for each byte: the printable Latin-1 bytes stand for themselves, the
// others for U+0100 onwards in byte order, so no token spelling holds a space or control character.
const std::array<char32_t, 256>& stand_ins() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The bytes a token's spelling stands for; a character that stands for no byte (in an added
// special token) stands for its own UTF-8.
std::string bytes_of_spelling(const std::string& spelling) {
  static const std::unordered_map<char32_t, unsigned char> byte_of = [] {
    std::unordered_map<char32_t, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[stand_ins()[static_cast<std::size_t>(b)]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string out;
  for (std::size_t i = 0; i < spelling.size();) {
    const auto b0 = static_cast<unsigned char>(spelling[i]);
    const std::size_t n = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (std::size_t k = 1; k < n && i + k < spelling.size(); ++k) c = (c << 6) | (spelling[i + k] & 0x3F);
    const auto it = byte_of.find(c);
    if (it != byte_of.end()) out += static_cast<char>(it->second);
    else out += spelling.substr(i, n);
    i += n;
  }
  return out;
}

// What a tokenizer folder holds, for errors.
const char* const kFolder = "a GPT-2 tokenizer folder holds vocab.json and merges.txt (as Hugging Face saves them)";

}  // namespace

struct Gpt2Tokenizer::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<std::int64_t>> pieces;
};

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& dir) {
  return Gpt2Tokenizer(read_text_file(dir + "/vocab.json", kFolder), read_text_file(dir + "/merges.txt", kFolder), dir);
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& vocab_json, const std::string& merges_txt, const std::string& source)
    : source_(source), cache_(std::make_shared<Cache>()) {
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, "tokenizer: ", source, "/vocab.json is not JSON (", printable(e.what()), ")");
  }
  TROUPE_CHECK(vocab.is_object() && !vocab.empty(), io, "tokenizer: ", source,
               "/vocab.json must be an object of token -> id");
  for (const auto& [spelling, id] : vocab.items()) {
    TROUPE_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < (1 << 24), io,
                 "tokenizer: ", source, "/vocab.json gives '", printable(spelling), "' the id ", printable(id.dump()),
                 "; ids are integers from 0");
    const auto k = static_cast<std::size_t>(id.get<std::int64_t>());
    if (tokens_.size() <= k) tokens_.resize(k + 1);
    tokens_[k] = bytes_of_spelling(spelling);
    ids_[spelling] = static_cast<std::int64_t>(k);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string s = utf8(stand_ins()[static_cast<std::size_t>(b)]);
    TROUPE_CHECK(ids_.count(s), io, "tokenizer: ", source, "/vocab.json has no token for byte ", b, " ('",
                 printable(s), "'); a byte-level vocabulary has one for each of the 256 bytes");
  }
  std::istringstream lines(merges_txt);
  std::string line;
  int number = 0, rank = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t space = line.find(' ');
    TROUPE_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                     line.find(' ', space + 1) == std::string::npos,
                 io, "tokenizer: ", source, "/merges.txt line ", number, " is '", printable(line),
                 "'; each line is two tokens separated by one space");
    ranks_.emplace(std::make_pair(line.substr(0, space), line.substr(space + 1)), rank++);
  }
}

std::vector<std::int64_t> Gpt2Tokenizer::encode_piece(std::string_view piece) const {
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    const auto it = cache_->pieces.find(std::string(piece));
    if (it != cache_->pieces.end()) return it->second;
  }
  std::vector<std::string> symbols;
  for (char c : piece) symbols.push_back(utf8(stand_ins()[static_cast<unsigned char>(c)]));
  // GPT-2's BPE: merge the adjacent pair of the lowest rank everywhere it occurs, until none has one.
  while (symbols.size() > 1) {
    int best = std::numeric_limits<int>::max();
    const std::pair<std::string, std::string>* best_pair = nullptr;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ranks_.find({symbols[i], symbols[i + 1]});
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        best_pair = &it->first;
      }
    }
    if (!best_pair) break;
    std::vector<std::string> merged;
    for (std::size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == best_pair->first && symbols[i + 1] == best_pair->second) {
        merged.push_back(symbols[i] + symbols[i + 1]);
        ++i;
      } else {
        merged.push_back(symbols[i]);
      }
    }
    symbols = std::move(merged);
  }
  std::vector<std::int64_t> ids;
  for (const std::string& s : symbols) {
    const auto it = ids_.find(s);
    TROUPE_CHECK(it != ids_.end(), io, "tokenizer: ", source_, "/merges.txt makes '", printable(s),
                 "', which vocab.json does not have; the two files must come from the same tokenizer");
    ids.push_back(it->second);
  }
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->pieces.size() >= 65536) cache_->pieces.clear();  // bounded: a long-running server sees endless words
  cache_->pieces.emplace(std::string(piece), ids);
  return ids;
}

std::vector<std::int64_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  for (std::string_view piece : gpt2_pretokenize(text)) {
    const std::vector<std::int64_t> part = encode_piece(piece);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::string Gpt2Tokenizer::token_bytes(std::int64_t id) const {
  TROUPE_CHECK(id >= 0 && id < vocab_size() && !(tokens_[static_cast<std::size_t>(id)].empty()), out_of_range,
               "tokenizer: token id ", id, " is not in ", source_, "/vocab.json (", vocab_size(), " ids)");
  return tokens_[static_cast<std::size_t>(id)];
}

std::string Gpt2Tokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string out;
  for (std::int64_t id : ids) out += token_bytes(id);
  return out;
}

std::optional<std::int64_t> Gpt2Tokenizer::end_of_text() const {
  const auto it = ids_.find("<|endoftext|>");
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace troupe::models
