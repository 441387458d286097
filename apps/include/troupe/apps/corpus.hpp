#pragma once
// Byte-level text data for troupe-gpt: a corpus loaded from a file or, by default, from the
// licence texts every Debian/Ubuntu machine ships, split into training and held-out bytes, and a
// sampler of random windows whose position is part of a checkpoint.

#include <cstdint>
#include <string>
#include <utility>

#include "troupe/kernels/tensor.hpp"

namespace troupe::apps {

/// Where troupe-gpt looks for its default corpus.
inline constexpr const char* kDefaultCorpusDir = "/usr/share/common-licenses";

/// The bytes of a corpus and where they came from.
struct Corpus {
  std::string bytes;
  std::string source;  // said at start: "/usr/share/common-licenses (12 files)", "file x.txt", ...
};

/// Reads `path` (throws naming it when missing, a folder, unreadable or empty); with an empty path, the text
/// files under kDefaultCorpusDir in name order, or a generated corpus when that folder is absent.
Corpus load_corpus(const std::string& path);

/// A deterministic generated English-like corpus of about `bytes` bytes (the fallback corpus).
std::string generated_corpus(std::size_t bytes);

/// The training part and the held-out tail (`val_fraction` of the bytes, at least one window);
/// `source` names the corpus when it is too short.
std::pair<std::string, std::string> split_corpus(const std::string& bytes, double val_fraction, std::int64_t seq,
                                                 const std::string& source);

/// Random windows of a byte string as (ids, targets) batches: targets are ids shifted by one.
/// Window k depends only on (seed, k), so the sampler resumes exactly from its position.
class WindowSampler {
 public:
  /// Throws when `data` is shorter than seq + 1 bytes (`what` names the data in the error).
  WindowSampler(const std::string& data, std::int64_t seq, std::int64_t batch, std::uint64_t seed, const std::string& what);
  /// The next batch: ids and targets, both i64 [batch, seq].
  std::pair<Tensor, Tensor> next();
  /// Windows drawn so far (checkpointed), and moving there.
  std::uint64_t position() const { return position_; }
  void set_position(std::uint64_t position) { position_ = position; }

 private:
  const std::string& data_;
  std::int64_t seq_, batch_;
  std::uint64_t seed_, position_ = 0;
};

}  // namespace troupe::apps
