#pragma once
// Next-token logits of troupe-gpt's model for a growing context, as sampling needs them, through
// graph::Jit at JIT_LEVEL (eagerly at 0). With the key/value cache (the default) the prompt runs
// once and each new token costs one position: a traced step whose inputs are the token, its
// position and every block's keys and values, kept for --seq positions so the step's shapes never
// change (one trace). Once the context passes --seq the window slides and the learned positions of
// every token in it shift, so each token recomputes the last --seq, as without the cache, which
// traces its window once per length.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "troupe/graph/amp.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/models/gpt.hpp"

namespace troupe::actors {
class Engine;
class Program;
enum class OpGrouping;
}  // namespace troupe::actors

namespace troupe::models {

/// Logits of the next token, for one context at a time (next()) or for rows decoded together
/// (add(), step(), keep_rows()): one traced step advances every row by one position, each at its
/// own, and rows may join and leave between steps (continuous batching). Not thread-safe: it keeps
/// the rows' caches.
class GptDecoder {
 public:
  /// Decodes with `model` (which must outlive it) at mixed precision `amp`, with the key/value
  /// cache or recomputing each window.
  GptDecoder(Gpt& model, graph::AmpOptions amp, bool kv_cache);
  ~GptDecoder();
  /// Runs the decoding steps as an actor program of `engine` (which must outlive the decoder), the
  /// rows split into `micro_batches` that flow through the op actors concurrently, instead of
  /// calling the traced step on this thread. At JIT level 0 the steps stay eager.
  void run_steps_on(actors::Engine& engine, int micro_batches);
  /// The same, with `grouping` of the step's ops into actors (ProgramOptions::group_ops).
  void run_steps_on(actors::Engine& engine, int micro_batches, actors::OpGrouping grouping);
  /// Logits [vocab] of the token after `context` (at least one token), as the only row:
  /// consecutive calls whose context grows by one token step it; any other context starts it
  /// again; past --seq tokens the window is recomputed.
  std::vector<float> next(const std::vector<std::int64_t>& context);

  /// Adds a row per prompt (each 1 to --seq tokens) after the current rows, running prompts of one
  /// length together; returns each new row's next-token logits.
  std::vector<std::vector<float>> add(const std::vector<std::vector<std::int64_t>>& prompts);
  /// Appends tokens[i] to row i (each row below --seq positions: see positions()) and returns each
  /// row's next-token logits.
  std::vector<std::vector<float>> step(const std::vector<std::int64_t>& tokens);
  /// Keeps the rows whose `keep` is true, in order (a finished request leaves the batch).
  void keep_rows(const std::vector<bool>& keep);
  /// The positions each row holds (its context's length).
  const std::vector<std::int64_t>& positions() const { return positions_; }

 private:
  graph::Jit& prompt_jit(std::int64_t n);
  graph::Jit& step_jit();
  std::vector<graph::InputSpec> step_signature() const;
  graph::TraceableFn step_fn();
  graph::Jit& window_jit(std::int64_t t);
  graph::Jit& traced(std::map<std::int64_t, graph::Jit>& jits, std::int64_t key, std::vector<graph::InputSpec> signature,
                     graph::TraceableFn fn);
  void reserve_rows(std::int64_t rows);

  Gpt& model_;
  graph::AmpOptions amp_;
  bool kv_cache_;
  std::map<std::int64_t, graph::Jit> prompts_, windows_;  // by prompt length, by window length
  std::optional<graph::Jit> step_;                         // traced on the first step
  std::unique_ptr<actors::Program> step_program_;  // run_steps_on()
  // k, v of every block, [slots, heads, --seq, head dim]: row r of the batch is slot r, so a step
  // reads the first rows as they are, and a step's new position is written in place.
  std::vector<Tensor> cache_;
  std::vector<std::int64_t> positions_;  // of each row
};

/// The next token from `logits`: the largest at temperature 0; otherwise drawn from
/// softmax(logits / temperature) over the `top_k` largest (0: all) and, below `top_p` = 1, over the
/// most likely of those whose probabilities first add up to `top_p` (nucleus sampling), with `rng`
/// (splitmix64 state).
std::int64_t sample_token(const std::vector<float>& logits, double temperature, std::int64_t top_k, std::uint64_t& rng,
                          double top_p = 1.0);

/// The log-probability of `token` under softmax(logits) (the model's own, before any sampling setting).
double token_logprob(const std::vector<float>& logits, std::int64_t token);

}  // namespace troupe::models
