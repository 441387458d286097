#pragma once
// One maker per fuzz target; each prepares its seeds under `scratch`.

#include <string>

#include "fuzz/fuzz_driver.hpp"

namespace troupe::fuzz {

/// graph::parse_safetensors on arbitrary bytes.
FuzzTarget safetensors_target(const std::string& scratch);
/// models::load_checkpoint and what a resume does with it (settings, weights, optimizer state); the
/// first byte picks the file replaced (latest, state.json, model or optimizer safetensors).
FuzzTarget checkpoint_target(const std::string& scratch);
/// troupe-sr's image path: a PNG file read by SrData next to a good one, then a batch drawn.
FuzzTarget png_target(const std::string& scratch);
/// troupe-gpt's corpus path: load_corpus, split_corpus and a window batch, with seq and the
/// held-out fraction taken from the first bytes.
FuzzTarget corpus_target(const std::string& scratch);
/// A strategy file (plan::load_strategy), checked against the step it was saved for
/// (strategy_request) and planned (propagate_sharding).
FuzzTarget strategy_target(const std::string& scratch);
/// troupe-report's inputs: a metrics file (read_metrics) or, when the first byte is odd, a trace
/// (summarize_trace) beside good metrics, made into a page (report_page).
FuzzTarget report_target(const std::string& scratch);
/// GPT-2's tokenizer: arbitrary text round trips, or arbitrary vocab.json and merges.txt loaded.
FuzzTarget tokenizer_target(const std::string& scratch);
/// Rank 0's side of the rendezvous: a stranger's bytes (or a rank with the right token followed by
/// arbitrary blob bytes, when the first byte is odd) on a socket pair.
FuzzTarget rendezvous_target(const std::string& scratch);

}  // namespace troupe::fuzz
