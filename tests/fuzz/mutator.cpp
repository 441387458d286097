#include "fuzz/mutator.hpp"

#include <algorithm>
#include <cctype>

namespace troupe::fuzz {

namespace {

// Numbers at the edges of every integer and float type, and texts JSON readers trip on.
const std::vector<std::string> kHostileNumbers = {
    "0",    "-0",   "1",    "-1",   "2",    "255",  "256", "65536", "2147483647", "2147483648", "-2147483649",
    "4294967295", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551615", "18446744073709551616", "1e309", "-1e309", "1e-400", "1.5",
    "0.5",  "nan",  "NaN",  "inf",  "-inf", "1e3",  "true", "null", "\"\"",  "[]",    "{}",         "\"7\""};

// Boundary integers written over 4 or 8 bytes (little-endian, as the safetensors and hello headers).
const std::vector<std::uint64_t> kBoundaryWords = {0,          1,          0x7f,       0x80,       0xff,
                                                   0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull,
                                                   0x7fffffffffffffffull,  0x8000000000000000ull,
                                                   0xffffffffffffffffull};

const char kBoundaryBytes[] = {0, 1, 0x7f, static_cast<char>(0x80), static_cast<char>(0xff), '"', '\\', '[', ']',
                               '{', '}', ',', ':', '-', '.', 'e', '\n', ' '};

}  // namespace

Mutator::Mutator(std::uint64_t seed, std::vector<std::string> dictionary, std::size_t max_size)
    : rng_(seed), dictionary_(std::move(dictionary)), max_size_(max_size) {
  dictionary_.insert(dictionary_.end(), kHostileNumbers.begin(), kHostileNumbers.end());
}

std::string Mutator::mutate(const std::string& input, const std::string& other) {
  std::string s = input;
  const std::size_t rounds = 1 + below(5);
  for (std::size_t i = 0; i < rounds; ++i) mutate_once(s, other);
  if (s.size() > max_size_) s.resize(max_size_);
  return s;
}

void Mutator::mutate_once(std::string& s, const std::string& other) {
  const std::size_t at = below(s.size() + 1);  // a position; s.size() appends
  switch (below(12)) {
    case 0:  // flip one bit
      if (!s.empty()) s[at % s.size()] ^= static_cast<char>(1 << below(8));
      break;
    case 1:  // any byte
      if (!s.empty()) s[at % s.size()] = static_cast<char>(below(256));
      break;
    case 2:  // a boundary or syntax byte
      if (!s.empty()) s[at % s.size()] = kBoundaryBytes[below(sizeof kBoundaryBytes)];
      break;
    case 3: {  // insert random bytes
      std::string bytes(1 + below(8), '\0');
      for (char& c : bytes) c = static_cast<char>(below(256));
      s.insert(at, bytes);
      break;
    }
    case 4:  // erase a range
      if (at < s.size()) s.erase(at, 1 + below(16));
      break;
    case 5:  // duplicate a range somewhere else
      if (!s.empty()) {
        const std::size_t from = below(s.size()), n = 1 + below(std::min<std::size_t>(64, s.size() - from));
        s.insert(below(s.size() + 1), s.substr(from, n));
      }
      break;
    case 6:  // truncate
      s.resize(at);
      break;
    case 7:  // insert a dictionary token
      s.insert(at, dictionary_[below(dictionary_.size())]);
      break;
    case 8: {  // overwrite with a dictionary token
      const std::string& t = dictionary_[below(dictionary_.size())];
      s.replace(std::min(at, s.size()), std::min(t.size(), s.size() - std::min(at, s.size())), t);
      break;
    }
    case 9: {  // replace the digit run at or after `at` by a hostile number
      std::size_t b = at;
      while (b < s.size() && !std::isdigit(static_cast<unsigned char>(s[b]))) ++b;
      if (b == s.size()) break;
      std::size_t e = b;
      while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '.')) ++e;
      if (b > 0 && s[b - 1] == '-') --b;
      s.replace(b, e - b, kHostileNumbers[below(kHostileNumbers.size())]);
      break;
    }
    case 10: {  // a boundary integer over 4 or 8 bytes, sometimes off by one
      const std::size_t width = below(2) ? 8 : 4;
      if (s.size() < width) break;
      std::uint64_t v = kBoundaryWords[below(kBoundaryWords.size())] + (below(4) == 0 ? 1 : 0);
      const std::size_t p = below(s.size() - width + 1);
      for (std::size_t i = 0; i < width; ++i, v >>= 8) s[p + i] = static_cast<char>(v & 0xff);
      break;
    }
    default:  // splice: this input's head, the other's tail
      if (!other.empty()) s = s.substr(0, at) + other.substr(below(other.size()));
      break;
  }
}

}  // namespace troupe::fuzz
