#!/usr/bin/env python3
"""The PyTorch side of `bench/run vs-torch`: the same workloads as bench/vs_torch_bench.cpp,
written the plain way a PyTorch user would (nn.Module, autograd, torch.optim, clip_grad_norm_).
Thread counts come from the caller: torch's via the argument, OpenBLAS's via OPENBLAS_NUM_THREADS.

usage: torch_workloads.py WORKLOAD TORCH_THREADS [relu|custom-relu|custom-relu-fn] [STEPS] [SIZE] [VARIANT]
sr-infer takes the image SIZE (default 128) and a VARIANT for bench/run jit: eager (default),
channels_last, or jit-freeze (torch.jit.trace, torch.jit.freeze, torch.jit.optimize_for_inference);
gpt-train-step, gpt-forward and sr-train-step take VARIANT f32 (default) or autocast (forward and
loss under torch.autocast("cpu", dtype=torch.bfloat16), as bench/run amp compares); sr-infer also
takes autocast and channels_last-autocast.
Prints {"workload":...,"ms":median}.
"""
import json, math, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h, ff):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=256, d=256, h=4, layers=4, ff=1024, seq=128):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, h, ff) for _ in range(layers))
        self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


class LeakyGradReLU(torch.autograd.Function):
    """relu forward, gradient slope 0.01 below zero: the article's custom ReLU as PyTorch users write it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, g, 0.01 * g)


class SR(nn.Module):
    def __init__(self, act, c=64, blocks=4):
        super().__init__()
        self.act = LeakyGradReLU.apply if act == "custom-relu-fn" else F.relu
        self.head = nn.Conv2d(3, c, 3, padding=1)
        self.body = nn.ModuleList(nn.ModuleList([nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)])
                                  for _ in range(blocks))
        self.tail = nn.Conv2d(c, 12, 3, padding=1)

    def forward(self, x):
        x = self.act(self.head(x))
        for c1, c2 in self.body:
            x = x + c2(self.act(c1(x)))
        return F.pixel_shuffle(self.tail(x), 2)


def main():
    workload, threads = sys.argv[1], int(sys.argv[2])
    act = sys.argv[3] if len(sys.argv) > 3 else "relu"
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    if workload.startswith("gpt"):
        model = GPT()
        x, y = torch.randint(0, 256, (8, 128)), torch.randint(0, 256, (8, 128))
        if workload == "gpt-train-step":
            opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
            variant = sys.argv[6] if len(sys.argv) > 6 else "f32"
            if variant not in ("f32", "autocast"):
                raise SystemExit(f"unknown gpt-train-step variant {variant}")

            def step():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "autocast"):
                    loss = F.cross_entropy(model(x).view(-1, 256).float(), y.view(-1))
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
        else:
            variant = sys.argv[6] if len(sys.argv) > 6 else "f32"
            if variant not in ("f32", "autocast"):
                raise SystemExit(f"unknown gpt-forward variant {variant}")

            def step():
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "autocast"):
                    model(x)
    else:
        model = SR(act)
        if workload == "sr-train-step":
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            x, y = torch.rand(4, 3, 64, 64), torch.rand(4, 3, 128, 128)
            variant = sys.argv[6] if len(sys.argv) > 6 else "f32"
            if variant not in ("f32", "autocast"):
                raise SystemExit(f"unknown sr-train-step variant {variant}")

            def step():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "autocast"):
                    loss = F.mse_loss(model(x).float(), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        else:
            size = int(sys.argv[5]) if len(sys.argv) > 5 else 128
            variant = sys.argv[6] if len(sys.argv) > 6 else "eager"
            x = torch.rand(1, 3, size, size)
            model.eval()
            autocast = variant.endswith("autocast")
            variant = {"autocast": "eager", "channels_last-autocast": "channels_last"}.get(variant, variant)
            if variant == "channels_last":
                model = model.to(memory_format=torch.channels_last)
                x = x.contiguous(memory_format=torch.channels_last)
            elif variant == "jit-freeze":
                with torch.no_grad():
                    model = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, x)))
            elif variant != "eager":
                raise SystemExit(f"unknown sr-infer variant {variant}")

            def step():
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    model(x)
    ms = []
    for i in range(steps + 2):
        t = time.perf_counter()
        step()
        if i >= 2:
            ms.append((time.perf_counter() - t) * 1e3)
    ms.sort()
    print(json.dumps({"workload": workload, "ms": round(ms[len(ms) // 2], 3)}))


if __name__ == "__main__":
    main()
