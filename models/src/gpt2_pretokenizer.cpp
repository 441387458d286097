#include "gpt2_pretokenizer.hpp"

#include <unicode/uchar.h>

#include <cstdint>

namespace troupe::models {

namespace {

enum class Kind { letter, number, space, other };

// One character of the text: where its bytes are and what the pattern sees in it.
struct Char {
  std::size_t begin = 0, end = 0;
  char32_t cp = 0;
  Kind kind = Kind::other;
};

// Python's str.isspace(): what GPT-2's \s matched when its tokenizer ran under Python.
bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

Kind kind_of(char32_t c) {
  if (python_space(c)) return Kind::space;
  const std::uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return Kind::letter;
  if (mask & U_GC_N_MASK) return Kind::number;
  return Kind::other;
}

// The length of the valid UTF-8 sequence at text[i] and its code point, or 0 for an invalid byte
// (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, a cut-off sequence).
std::size_t utf8_at(std::string_view text, std::size_t i, char32_t& cp) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t n = 0;
  char32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, cp = b0 & 0x1F, min = 0x80;
  else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, cp = b0 & 0x0F, min = 0x800;
  else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, cp = b0 & 0x07, min = 0x10000;
  else return 0;
  if (i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

std::vector<Char> characters(std::string_view text) {
  std::vector<Char> out;
  for (std::size_t i = 0; i < text.size();) {
    Char c;
    c.begin = i;
    const std::size_t n = utf8_at(text, i, c.cp);
    c.end = i + (n == 0 ? 1 : n);
    c.kind = n == 0 ? Kind::other : kind_of(c.cp);
    out.push_back(c);
    i = c.end;
  }
  return out;
}

// The length in characters of the contraction ('s 't 're 've 'm 'll 'd) at cs[i], or 0.
std::size_t contraction_at(const std::vector<Char>& cs, std::size_t i) {
  if (cs[i].cp != U'\'' || i + 1 >= cs.size()) return 0;
  const char32_t a = cs[i + 1].cp;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= cs.size()) return 0;
  const char32_t b = cs[i + 2].cp;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

// The end of a run of `kind` from cs[i], after an optional leading ' ' (" ?\p{L}+" and its kin), or i.
std::size_t run_at(const std::vector<Char>& cs, std::size_t i, Kind kind) {
  std::size_t j = i + (cs[i].cp == U' ' ? 1 : 0);
  if (j >= cs.size() || cs[j].kind != kind) return i;
  while (j < cs.size() && cs[j].kind == kind) ++j;
  return j;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  const std::vector<Char> cs = characters(text);
  std::vector<std::string_view> pieces;
  for (std::size_t i = 0; i < cs.size();) {
    std::size_t end = i;
    if (const std::size_t n = contraction_at(cs, i)) end = i + n;
    for (Kind kind : {Kind::letter, Kind::number, Kind::other})
      if (end == i) end = run_at(cs, i, kind);
    if (end == i) {
      // Whitespace: the run, less its last character when a non-space follows (\s+(?!\S)), which
      // then leads the next piece; a lone one before a non-space is a piece of its own (\s+).
      std::size_t k = i;
      while (k < cs.size() && cs[k].kind == Kind::space) ++k;
      end = k < cs.size() && k - i >= 2 ? k - 1 : k;
    }
    pieces.push_back(text.substr(cs[i].begin, cs[end - 1].end - cs[i].begin));
    i = end;
  }
  return pieces;
}

}  // namespace troupe::models
