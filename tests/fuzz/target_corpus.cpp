// troupe-gpt's text path on an arbitrary file: the first two bytes choose the window length and the
// held-out fraction (as flags would), the rest is the corpus; it is loaded, split and sampled.
#include "fuzz/files.hpp"
#include "fuzz/targets.hpp"
#include "troupe/apps/corpus.hpp"

namespace troupe::fuzz {

FuzzTarget corpus_target(const std::string& scratch) {
  const std::string path = scratch + "/corpus.txt";
  FuzzTarget t;
  t.name = "corpus";
  t.seeds = {std::string("\x10\x20", 2) + apps::generated_corpus(300), std::string("\x01\x7f", 2) + "ab",
             std::string("\x40\x01", 2) + apps::generated_corpus(70)};
  t.run = [path](const std::string& input) {
    if (input.size() < 2) return std::string("too short for the settings");
    const std::int64_t seq = 1 + static_cast<unsigned char>(input[0]) % 64;
    const double val_fraction = (1 + static_cast<unsigned char>(input[1]) % 99) / 100.0;
    write_bytes(path, input.substr(2));
    const apps::Corpus corpus = apps::load_corpus(path);
    const auto [train, val] = apps::split_corpus(corpus.bytes, val_fraction, seq, corpus.source);
    apps::WindowSampler sampler(train, seq, 2, 7, corpus.source);
    const auto [ids, targets] = sampler.next();
    (void)targets;
    return std::string(ids.numel() == 2 * seq ? "accepted" : "wrong batch");
  };
  return t;
}

}  // namespace troupe::fuzz
