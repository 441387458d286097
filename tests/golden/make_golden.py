#!/usr/bin/python3
"""Writes the PyTorch golden fixtures of tests/graph/test_golden.cpp into tests/data/.

Run with Debian's python3-torch (1.13, CPU):  /usr/bin/python3 tests/golden/make_golden.py [NAME ...]
The test suite reads the committed .safetensors files and never needs torch. Each model file holds the
model's parameters ("param.<name>", Troupe's names), the inputs ("input.*"), the forward output
("output.y") and the gradient of loss = sum(y * r) for every parameter ("grad.<name>"), all f32;
golden_adamw holds AdamW's parameter and moments after each step ("param.k", "exp_avg.k",
"exp_avg_sq.k") on the gradients "grad.k".
"""
import json
import math
import os
import struct
import sys

import torch
from torch import nn

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")


def save_safetensors(path, tensors, metadata):
    """The safetensors layout, written directly so no extra Python package is needed."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().to(torch.float32)
        raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for raw in blobs:
            f.write(raw)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(hd)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.proj = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.proj(nn.functional.gelu(self.fc(x), approximate="tanh"))


class GPTBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def golden(model, x, path, description, write):
    # LayerNorm starts at ones/zeros; perturb it so its gradients are checked at a general point.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ln1.weight", "ln2.weight")):
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith(("ln1.bias", "ln2.bias")):
                p.copy_(0.1 * torch.randn_like(p))
    y = model(x)
    r = torch.randn_like(y)
    (y * r).sum().backward()
    tensors = {"input.x": x, "input.r": r, "output.y": y}
    for name, p in model.named_parameters():
        tensors["param." + name] = p
        tensors["grad." + name] = p.grad
    if write:  # (computed either way: the next fixture's random draws follow this one's)
        save_safetensors(path, tensors, {"made_by": "tests/golden/make_golden.py", "torch": torch.__version__,
                                         "model": description})


def golden_adamw(path):
    """torch.optim.AdamW's parameter and moments after each of 4 steps on fixed gradients."""
    torch.manual_seed(99)
    p = torch.randn(257, requires_grad=True)
    tensors = {"param.0": p.detach().clone()}
    opt = torch.optim.AdamW([p], lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    for step in range(1, 5):
        g = torch.randn(257)
        p.grad = g.clone()
        opt.step()
        state = opt.state[p]
        tensors[f"grad.{step}"] = g
        tensors[f"param.{step}"] = p.detach().clone()
        tensors[f"exp_avg.{step}"] = state["exp_avg"].clone()
        tensors[f"exp_avg_sq.{step}"] = state["exp_avg_sq"].clone()
    save_safetensors(path, tensors, {"made_by": "tests/golden/make_golden.py", "torch": torch.__version__,
                                     "model": "AdamW lr 3e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.1; 257 elements"})


def main(names):
    """Writes the fixtures named (gpt_block, conv_net, adamw), or all of them. The models' values depend
    on the CPU torch runs on (its kernels' summation order), so rewrite only the fixture a change needs."""
    wanted = set(names) or {"gpt_block", "conv_net", "adamw"}
    torch.manual_seed(1234)
    golden(GPTBlock(32, 4), torch.randn(2, 8, 32), os.path.join(DATA, "golden_gpt_block.safetensors"),
           "pre-LN GPT block, C=32, H=4; x [2, 8, 32]", "gpt_block" in wanted)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 12, 3, padding=1), nn.PixelShuffle(2))
    golden(net, torch.randn(2, 3, 6, 6), os.path.join(DATA, "golden_conv_net.safetensors"),
           "conv(3->8,3,p1) relu conv(8->12,3,p1) pixel_shuffle(2); x [2, 3, 6, 6]", "conv_net" in wanted)
    if "adamw" in wanted:
        golden_adamw(os.path.join(DATA, "golden_adamw.safetensors"))


if __name__ == "__main__":
    main(sys.argv[1:])
