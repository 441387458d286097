#pragma once
// GPT-2's pre-tokenizer: the text cut into the pieces BPE runs on, as GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// cuts it, written out by hand over the text's code points (letters and numbers by their Unicode
// general category, whitespace as Python's str.isspace). Bytes that are not valid UTF-8 are kept,
// each as a character of its own that is neither letter, number nor space, so any byte string
// splits into pieces that concatenate back to it.

#include <string>
#include <string_view>
#include <vector>

namespace troupe::models {

/// The pieces of `text` (byte ranges of it, in order, covering it exactly).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace troupe::models
