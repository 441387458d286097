#!/usr/bin/python3
"""Writes the GPT-2 checkpoint fixture of tests/models/test_gpt2.cpp into tests/data/gpt2_tiny/.

Run with Debian's python3-torch (1.13, CPU):  /usr/bin/python3 tests/golden/make_gpt2_model.py
No network and no transformers package: a tiny GPT-2-shaped model with random weights is written in
Hugging Face's layout (config.json; model.safetensors with "transformer."-prefixed names, Conv1D
weights [in, out], the causal-mask buffers older checkpoints carry, no lm_head: it is tied to wte),
and GPT-2's forward pass, written here from its definition (pre-LayerNorm blocks, tanh GELU,
learned positions, the tied head), gives the logits of two id sequences (expected.safetensors:
"ids" i64 [2, 12], "logits" f32 [2, 12, vocab]). Its vocabulary is the tokenizer fixture's
(tests/golden/make_gpt2_tokenizer.py, run first), whose vocab.json and merges.txt are copied beside
the weights, as a checkpoint folder from the hub holds them.
"""
import json
import math
import os
import shutil
import struct

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gpt2_tiny")
TOKENIZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gpt2_tokenizer")
CONFIG = {"model_type": "gpt2", "vocab_size": 657, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 4,
          "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        dtype = {torch.float32: "F32", torch.int64: "I64", torch.uint8: "U8"}[t.dtype]
        raw = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def weights(gen):
    c, d, ff = CONFIG, CONFIG["n_embd"], 4 * CONFIG["n_embd"]
    r = lambda *shape, std=0.02: torch.randn(*shape, generator=gen) * std
    w = {"transformer.wte.weight": r(c["vocab_size"], d, std=0.1), "transformer.wpe.weight": r(c["n_positions"], d, std=0.05),
         "transformer.ln_f.weight": 1 + r(d, std=0.1), "transformer.ln_f.bias": r(d, std=0.1)}
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        w.update({p + "ln_1.weight": 1 + r(d, std=0.1), p + "ln_1.bias": r(d, std=0.1),
                  p + "attn.c_attn.weight": r(d, 3 * d, std=0.2), p + "attn.c_attn.bias": r(3 * d, std=0.1),
                  p + "attn.c_proj.weight": r(d, d, std=0.2), p + "attn.c_proj.bias": r(d, std=0.1),
                  p + "ln_2.weight": 1 + r(d, std=0.1), p + "ln_2.bias": r(d, std=0.1),
                  p + "mlp.c_fc.weight": r(d, ff, std=0.2), p + "mlp.c_fc.bias": r(ff, std=0.1),
                  p + "mlp.c_proj.weight": r(ff, d, std=0.2), p + "mlp.c_proj.bias": r(d, std=0.1)})
    return w


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(w, ids):
    c, d, heads = CONFIG, CONFIG["n_embd"], CONFIG["n_head"]
    eps, (b, t) = c["layer_norm_epsilon"], ids.shape
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), w[p + ".weight"], w[p + ".bias"], eps)
    conv1d = lambda x, p: x @ w[p + ".weight"] + w[p + ".bias"]  # Conv1D: weight [in, out]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][torch.arange(t)]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(d, dim=2)
        q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + conv1d(y, p + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T


def main():
    gen = torch.Generator().manual_seed(2)
    w = weights(gen)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(TOKENIZER, "vocab.json"), encoding="utf-8") as f:
        assert len(json.load(f)) == CONFIG["vocab_size"], "the tokenizer fixture's vocabulary changed size"
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(TOKENIZER, name), os.path.join(OUT, name))
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    saved = dict(w)
    t = CONFIG["n_positions"]
    for i in range(CONFIG["n_layer"]):  # the mask buffers older checkpoints carry, which a loader skips
        saved[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(t, t)).view(1, 1, t, t).to(torch.uint8)
    save_safetensors(os.path.join(OUT, "model.safetensors"), saved)
    ids = torch.randint(0, CONFIG["vocab_size"], (2, 12), generator=gen)
    with torch.no_grad():
        logits = forward(w, ids)
    save_safetensors(os.path.join(OUT, "expected.safetensors"), {"ids": ids, "logits": logits})
    print(f"logits {tuple(logits.shape)}, |logits| max {logits.abs().max():.3f}")


if __name__ == "__main__":
    main()
