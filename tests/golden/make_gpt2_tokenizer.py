#!/usr/bin/python3
"""Writes the GPT-2 tokenizer fixture of tests/models/test_gpt2_tokenizer.cpp into tests/data/gpt2_tokenizer/.

Run with Debian's python3:  /usr/bin/python3 tests/golden/make_gpt2_tokenizer.py
No network and no tokenizer package: a small byte-level BPE vocabulary is learned here from the text
below, written in Hugging Face's layout (vocab.json, merges.txt), and a reference encoder written
here from GPT-2's published algorithm (its pre-tokenizer pattern, with \\p{L} and \\p{N} expanded
from unicodedata, and its BPE loop) encodes the cases in cases.json: each case's bytes (hex, so
invalid UTF-8 fits), the pieces the pre-tokenizer cuts it into and the ids it must encode to. Invalid bytes reach the pattern as lone
surrogates (surrogateescape): characters that are neither letter, number nor space.
"""
import collections
import json
import os
import re
import sys
import unicodedata

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gpt2_tokenizer")
MERGES = 400

TEXT = """The quick brown fox doesn't jump; it's lazy, and they're sure we've seen it. I'm here, you'll see, he'd go.
Numbers: 3.14159, 2024-12-07, 1,000,000 and ٣٤٥ (Arabic-Indic) or ¼ ½ ⅓ Ⅻ.
Accents: naïve café résumé Ünïcödé façade — Straße größer. Ελληνικά κείμενο. Русский текст здесь.
中文文本在这里，日本語のテキスト、한국어 텍스트. Emoji: 🙂🚀👍🏽 and symbols ©®™ ∑∫√ ≤≥ ←→.
Whitespace   runs,	tabs	and
new lines\n\n  indented lines   end with spaces   
Code: def f(x): return x**2 + 1  # comment; if (a && b) { c++; } 'quoted' "double" `back`
URLs: https://example.com/path?q=1&r=two#frag email@example.org
Contractions again: Don't WON'T it'S we'Ve they'RE She'll I'D 'tis o'clock rock'n'roll.
The the THE tHe thee there their they're. Token tokens tokenizer tokenization tokenized.
"""

CASES = [
    "Hello, world!",
    "The quick brown fox doesn't jump over the lazy dog's back.",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\r\nmixed \t \n end",
    "numbers 12345 and 3.5e-7, 1,000",
    "naïve café — Straße",
    "中文文本，日本語のテキスト",
    "emoji 🙂🚀👍🏽!",
    "Don't WON'T it's we've they're she'll I'd 'tis",
    "x" * 50 + " " + "ab" * 30,
    "",
    " ",
    "\n\n\n",
    "a  b   c    d",
    "\u00a0non-breaking\u3000ideographic\u2003em",
    "Ⅻ ½ ٣٤٥",
    "½! Ⅻ? ³x abc123def x²y 5km",
    "unseen wordsmithery: zyzzyva quixotic",
]
# Byte strings that are not valid UTF-8: stray continuation bytes, cut-off sequences, overlong forms,
# surrogates, past U+10FFFF, and the bytes that never occur in UTF-8.
BYTE_CASES = [
    b"\x80abc",
    b"abc\xe2\x82",
    b"\xe2\x82 euro",
    b"\xc0\x80 overlong",
    b"\xed\xa0\x80 surrogate",
    b"\xf4\x90\x80\x80 too big",
    b"\xfe\xff bytes",
    bytes(range(256)),
    b"mixed \xff caf\xc3\xa9 \xe9t\xe9",
]


def char_class(prefix):
    """A regex character-class body for the code points whose general category starts with prefix."""
    ranges, start, last = [], None, None
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if unicodedata.category(chr(cp)).startswith(prefix):
            if start is None:
                start = cp
            last = cp
        elif start is not None:
            ranges.append((start, last))
            start = None
    if start is not None:
        ranges.append((start, last))
    esc = lambda cp: "\\U%08x" % cp
    return "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in ranges)


L, N = char_class("L"), char_class("N")
PATTERN = re.compile(
    rf"""'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^\s{L}{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE = bytes_to_unicode()


def pieces(data):
    text = data.decode("utf-8", "surrogateescape")
    return [p.encode("utf-8", "surrogateescape") for p in PATTERN.findall(text)]


def learn(text):
    words = collections.Counter(tuple(BYTE[b] for b in p) for p in pieces(text.encode()))
    merges = []
    for _ in range(MERGES):
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    vocab = {}
    for b in sorted(BYTE):
        vocab[BYTE[b]] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def encode(data, vocab, ranks):
    ids = []
    for p in pieces(data):
        word = [BYTE[b] for b in p]
        while len(word) > 1:
            pair = min(zip(word, word[1:]), key=lambda q: ranks.get(q, float("inf")))
            if pair not in ranks:
                break
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        ids += [vocab[w] for w in word]
    return ids


def main():
    if sys.version_info < (3, 8):
        raise SystemExit("needs Python 3.8 or newer")
    vocab, merges = learn(TEXT)
    ranks = {m: i for i, m in enumerate(merges)}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(OUT, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    cases = [{"hex": b.hex(), "pieces": [p.hex() for p in pieces(b)], "ids": encode(b, vocab, ranks)}
             for b in [s.encode() for s in CASES + [TEXT]] + BYTE_CASES]
    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"unicode": unicodedata.unidata_version, "cases": cases}, f, indent=0)
    print(f"{len(vocab)} tokens, {len(merges)} merges, {len(cases)} cases, Unicode {unicodedata.unidata_version}")


if __name__ == "__main__":
    main()
