#!/usr/bin/env python3
"""bench/run amp: what mixed precision buys, in one invocation, runs alternating (ROUNDS rounds,
medians). One JSON line per measurement on stdout, each naming the CPU's ISA:
  gpt-train-amp     gpt-mini's training step (batch 8 x 128, AdamW, clip 1.0) at JIT level 3:
                    Troupe O0 (f32) and O1 (bf16 products), next to PyTorch f32 and
                    torch.autocast("cpu", bfloat16), each PyTorch side at its best thread setting
  gpt-converge-amp  troupe-gpt trained 450 steps at O0 and at O1 bf16: final train and val loss
Levels this version does not have (O2) are left out of the lines.
"""
import json, os, subprocess, sys

from jit import TORCH_PYTHON, alternate, log, machine, run_json, torch_settings

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERGE_STEPS = 450


def native_isa():
    """amx, avx512_bf16 or none: what the CPU has for bf16, in the issue's words."""
    flags = machine()["isa"]
    return {"avx512-amx": "amx", "avx512-bf16": "avx512_bf16"}.get(flags, "none")


def emit(line):
    print(json.dumps({**line, "isa": native_isa(), "cpu": machine()["cpu"]}), flush=True)


def gpt_train(build, env, threads):
    def ours(amp):
        cmd = [os.path.join(build, "bench", "troupe-bench-jit"), "gpt-train", "3", str(threads), "128", "4", amp]
        return lambda: run_json(cmd, env)

    def theirs(variant):
        best = None
        for _, th, extra in torch_settings(threads):
            cmd = [TORCH_PYTHON, os.path.join(HERE, "torch_workloads.py"), "gpt-train-step", str(th), "relu", "4", "0",
                   variant]
            ms = run_json(cmd, {**env, **extra})["ms"]
            if best is None or ms < best[0]:
                best = (ms, cmd, {**env, **extra})
        return lambda: run_json(best[1], best[2])

    o0, o1, t32, tac = alternate([ours("O0"), ours("O1"), theirs("f32"), theirs("autocast")])
    emit({"bench": "gpt-train-amp", "threads": threads, "o0_ms": round(o0["ms"], 2), "o1_ms": round(o1["ms"], 2),
          "torch_f32_ms": round(t32["ms"], 2), "torch_autocast_ms": round(tac["ms"], 2),
          "ratio_o1_vs_o0": round(o1["ms"] / o0["ms"], 3), "ratio_vs_torch_autocast": round(o1["ms"] / tac["ms"], 3),
          "peak_bytes_o0": o0["peak_bytes"], "peak_bytes_o1": o1["peak_bytes"]})


def converge(build, env):
    final = {}
    for amp in ("O0", "O1"):
        log(f"gpt-mini, {CONVERGE_STEPS} steps at {amp}")
        cmd = [os.path.join(build, "apps", "troupe-gpt"), "--steps", str(CONVERGE_STEPS), "--eval-every",
               str(CONVERGE_STEPS), "--amp", amp]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        final[amp] = json.loads(out.strip().splitlines()[-1])
    o0, o1 = final["O0"], final["O1"]
    emit({"bench": "gpt-converge-amp", "steps": CONVERGE_STEPS, "o0_train_loss": o0["train_loss"],
          "o1_train_loss": o1["train_loss"], "o0_val_loss": o0["val_loss"], "o1_val_loss": o1["val_loss"],
          "val_loss_rel_diff": round((o1["val_loss"] - o0["val_loss"]) / o0["val_loss"], 6),
          "o0_ms_per_step": o0["ms_per_step"], "o1_ms_per_step": o1["ms_per_step"]})


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    env = dict(os.environ)
    for threads in sorted({1, os.cpu_count() or 1}):
        log(f"gpt-train, {threads} thread(s)")
        gpt_train(build, env, threads)
    converge(build, env)


if __name__ == "__main__":
    main()
