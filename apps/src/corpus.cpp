#include "troupe/apps/corpus.hpp"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "troupe/models/weights.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/splitmix.hpp"

namespace troupe::apps {

namespace fs = std::filesystem;

std::string generated_corpus(std::size_t bytes) {
  // Sentences from a small grammar: enough structure (words, punctuation, repetition) for the loss
  // to fall well below the 5.5 nats of uniform bytes.
  static const std::vector<std::string> subjects = {"the actor", "a message", "every gradient", "the planner",
                                                    "one tensor", "the optimizer", "a worker", "the graph"};
  static const std::vector<std::string> verbs = {"sends", "receives", "reduces", "waits for", "updates",
                                                 "computes", "releases", "places"};
  static const std::vector<std::string> objects = {"a register", "the next batch", "its inputs", "the loss",
                                                   "a bucket", "the weights", "every shard", "the result"};
  static const std::vector<std::string> tails = {".", " quickly.", " again.", ", then stops.", " in order."};
  std::string out;
  std::uint64_t k = 0;
  while (out.size() < bytes) {
    const std::uint64_t r = models::mix64(++k);
    std::string s = subjects[r % subjects.size()] + " " + verbs[(r >> 8) % verbs.size()] + " " +
                    objects[(r >> 16) % objects.size()] + tails[(r >> 24) % tails.size()];
    s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    out += s;
    out += (r >> 32) % 6 == 0 ? "\n" : " ";
  }
  out.resize(bytes);
  return out;
}

Corpus load_corpus(const std::string& path) {
  if (!path.empty()) {
    Corpus c{models::read_text_file(path, "--data takes a text file"), "file " + path};
    TROUPE_CHECK(!c.bytes.empty(), invalid_argument, "corpus '", path, "' is empty; pass a file with text in it");
    return c;
  }
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(kDefaultCorpusDir, ec))
    for (const auto& e : fs::directory_iterator(kDefaultCorpusDir, ec))
      if (e.is_regular_file(ec) && !e.is_symlink(ec)) files.push_back(e.path());  // links repeat other files
  std::sort(files.begin(), files.end());
  Corpus c;
  for (const auto& f : files) c.bytes += models::read_text_file(f.string(), "--data takes a text file");
  if (c.bytes.empty()) {
    c.bytes = generated_corpus(1 << 20);
    c.source = std::string("generated text (") + kDefaultCorpusDir + " is absent or empty; pass --data FILE for real text)";
  } else {
    c.source = std::string(kDefaultCorpusDir) + " (" + std::to_string(files.size()) + " files)";
  }
  return c;
}

std::pair<std::string, std::string> split_corpus(const std::string& bytes, double val_fraction, std::int64_t seq,
                                                 const std::string& source) {
  TROUPE_CHECK(val_fraction > 0 && val_fraction < 1, invalid_argument, "--val-fraction must be in (0, 1), got ",
               val_fraction);
  const auto window = static_cast<std::size_t>(seq + 1);
  const auto val = std::max(window, static_cast<std::size_t>(static_cast<double>(bytes.size()) * val_fraction));
  TROUPE_CHECK(bytes.size() >= val + window, invalid_argument, "the corpus (", source, ") has ", bytes.size(),
               " bytes, too few for a training and a held-out window of ", window, " bytes each (--seq ", seq,
               " + 1); use a bigger file or a smaller --seq");
  return {bytes.substr(0, bytes.size() - val), bytes.substr(bytes.size() - val)};
}

WindowSampler::WindowSampler(const std::string& data, std::int64_t seq, std::int64_t batch, std::uint64_t seed,
                             const std::string& what)
    : data_(data), seq_(seq), batch_(batch), seed_(seed) {
  TROUPE_CHECK(seq > 0 && batch > 0, invalid_argument, "seq and batch must be positive");
  TROUPE_CHECK(static_cast<std::int64_t>(data.size()) > seq, invalid_argument, what, " has ", data.size(),
               " bytes, fewer than one window of ", seq + 1);
}

std::pair<Tensor, Tensor> WindowSampler::next() {
  Tensor ids = Tensor::empty({batch_, seq_}, DType::i64), targets = Tensor::empty({batch_, seq_}, DType::i64);
  std::int64_t* x = ids.data<std::int64_t>();
  std::int64_t* y = targets.data<std::int64_t>();
  const std::uint64_t starts = data_.size() - static_cast<std::size_t>(seq_);  // window start in [0, starts)
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::size_t start = models::mix64(seed_ * 0x100000001b3ULL + position_++) % starts;
    for (std::int64_t t = 0; t < seq_; ++t) {
      x[b * seq_ + t] = static_cast<unsigned char>(data_[start + static_cast<std::size_t>(t)]);
      y[b * seq_ + t] = static_cast<unsigned char>(data_[start + static_cast<std::size_t>(t) + 1]);
    }
  }
  return {ids, targets};
}

}  // namespace troupe::apps
