#!/usr/bin/env python3
"""bench/run amp: what mixed precision buys, in one invocation, runs alternating (ROUNDS rounds,
medians). One JSON line per measurement on stdout, each naming the CPU's ISA:
  gpt-train-amp     gpt-mini's training step (batch 8 x 128, AdamW, clip 1.0)
  gpt-forward-amp   gpt-mini's logits (batch 8 x 128)
  sr-train-amp      sr-lite's training step (batch 4 of 64x64 -> 128x128, Adam)
  sr-infer-amp      sr-lite on one 128x128 image
                    each at JIT level 3, Troupe O0 (f32), O1 (bf16 products and convolutions), O2
                    (bf16 activations) and O3 (every op in bf16), next
                    to PyTorch f32 and torch.autocast("cpu", bfloat16), each PyTorch side at its
                    fastest variant and thread setting (named in the line)
  gpt-train-floor   troupe-gpt's own training step (its defaults on THREADS threads: O2 bf16, 2 micro-batches on 2+)
                    against the step's products timed alone (gemm_floor_ms) and PyTorch's best of f32
                    and autocast, with the fraction of the cores the step's trace shows computing
  gpt-converge-amp  troupe-gpt trained 450 steps at O0, O1, O2 and O3 bf16: final train and val loss
                    (val_loss_rel_diff is O2's against O0's, as the issue asks)
"""
import csv, json, os, statistics, subprocess, sys

from jit import TORCH_PYTHON, alternate, log, machine, run_json, torch_settings, troupe_env

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERGE_STEPS = 450


def native_isa():
    """amx, avx512_bf16 or none: what the CPU has for bf16, in the issue's words."""
    flags = machine()["isa"]
    return {"avx512-amx": "amx", "avx512-bf16": "avx512_bf16"}.get(flags, "none")


def emit(line):
    print(json.dumps({**line, "isa": native_isa(), "cpu": machine()["cpu"]}), flush=True)
    return line


def app_step(build, env, threads, trace=None):
    """troupe-gpt's training step at its default settings on THREADS threads: the median step_ms
    of steps 11-36 (from --metrics), and with TRACE the last step's trace."""
    metrics = os.path.join(build, "amp-floor.metrics.csv")
    cmd = [os.path.join(build, "apps", "troupe-gpt"), "--threads", str(threads), "--steps", "36", "--eval-every", "36",
           "--metrics", metrics] + (["--trace", trace] if trace else [])
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    with open(metrics) as f:
        rows = list(csv.DictReader(f))[10:]
    return {"ms": statistics.median(float(r["step_ms"]) for r in rows)}


def cores_busy(build, trace, threads):
    """The fraction of the cores' time the last traced step kept computing: sum over k of k times the
    fraction of the wall during which k threads computed kernels (scheduler threads and pool helpers), over the
    threads."""
    out = subprocess.run([os.path.join(build, "apps", "troupe-trace"), "summary", trace, "--json"], check=True,
                         capture_output=True, text=True).stdout
    at_once = json.loads(out)["steps"][-1]["kernels_at_once"]
    return sum(k * f for k, f in enumerate(at_once)) / threads


def floor(build, env, threads, train_line):
    """gpt-train-floor: the app's default step (O2 bf16 where the CPU has bf16) against its products
    alone (troupe-bench-jit gpt-train-floor: each product of the step's graph, one after another, on
    THREADS threads) and against PyTorch's best of f32 and autocast from TRAIN_LINE."""
    floor_cmd = [os.path.join(build, "bench", "troupe-bench-jit"), "gpt-train-floor", "3", str(threads), "128", "6", "O2"]
    step, products = alternate([lambda: app_step(build, env, threads),
                                lambda: run_json(floor_cmd, troupe_env(env))])
    trace = os.path.join(build, "amp-floor.trace.json")
    app_step(build, env, threads, trace)
    best = min([(train_line["torch_f32_ms"], train_line["torch_f32"]),
                (train_line["torch_autocast_ms"], train_line["torch_autocast"])])
    emit({"bench": "gpt-train-floor", "threads": threads, "precision": "bf16", "step_ms": round(step["ms"], 2),
          "gemm_floor_ms": round(products["ms"], 2), "ratio_to_floor": round(step["ms"] / products["ms"], 3),
          "torch_best_ms": best[0], "torch_best": best[1], "ratio_vs_torch_best": round(step["ms"] / best[0], 3),
          "cores_busy": round(cores_busy(build, trace, threads), 3)})


# Each line: the Troupe workload (bench/jit_bench.cpp), the PyTorch one (bench/torch_workloads.py)
# with the variants each side may take (the fastest of them at the fastest thread setting is timed),
# the image size and the steps per measurement.
WORKLOADS = [
    ("gpt-train-amp", "gpt-train", "gpt-train-step", ["f32"], ["autocast"], 128, 4),
    ("gpt-forward-amp", "gpt-forward", "gpt-forward", ["f32"], ["autocast"], 128, 6),
    ("sr-train-amp", "sr-train", "sr-train-step", ["f32"], ["autocast"], 0, 4),
    ("sr-infer-amp", "sr-infer", "sr-infer", ["eager", "channels_last", "jit-freeze"],
     ["autocast", "channels_last-autocast"], 128, 6),
]


def measure(build, env, threads, bench, ours_name, theirs_name, f32_variants, autocast_variants, size, steps):
    def ours(amp):
        cmd = [os.path.join(build, "bench", "troupe-bench-jit"), ours_name, "3", str(threads), str(size or 128),
               str(steps), amp]
        return lambda: run_json(cmd, troupe_env(env))

    def theirs(variants):
        tried = []
        for variant in variants:
            for _, th, extra in torch_settings(threads):
                cmd = [TORCH_PYTHON, os.path.join(HERE, "torch_workloads.py"), theirs_name, str(th), "relu", str(steps),
                       str(size), variant]
                tried.append((run_json(cmd, {**env, **extra})["ms"], cmd, {**env, **extra}, variant))
        _, cmd, run_env, variant = min(tried, key=lambda t: t[0])
        return variant, lambda: run_json(cmd, run_env)

    f32_variant, t32_run = theirs(f32_variants)
    ac_variant, tac_run = theirs(autocast_variants)
    o0, o1, o2, o3, t32, tac = alternate([ours("O0"), ours("O1"), ours("O2"), ours("O3"), t32_run, tac_run])
    return emit({"bench": bench, "threads": threads, "o0_ms": round(o0["ms"], 2), "o1_ms": round(o1["ms"], 2),
          "o2_ms": round(o2["ms"], 2), "o3_ms": round(o3["ms"], 2), "torch_f32_ms": round(t32["ms"], 2),
          "torch_f32": f32_variant,
          "torch_autocast_ms": round(tac["ms"], 2), "torch_autocast": ac_variant,
          "ratio_o1_vs_o0": round(o1["ms"] / o0["ms"], 3), "ratio_o2_vs_o0": round(o2["ms"] / o0["ms"], 3),
          "ratio_o3_vs_o0": round(o3["ms"] / o0["ms"], 3), "ratio_o3_vs_torch_autocast": round(o3["ms"] / tac["ms"], 3),
          "ratio_vs_torch_autocast": round(o2["ms"] / tac["ms"], 3),
          "ratio_o1_vs_torch_autocast": round(o1["ms"] / tac["ms"], 3), "peak_bytes_o0": o0["peak_bytes"],
          "peak_bytes_o1": o1["peak_bytes"], "peak_bytes_o2": o2["peak_bytes"],
          "peak_bytes_o3": o3["peak_bytes"]})


def converge(build, env):
    final = {}
    for amp in ("O0", "O1", "O2", "O3"):
        log(f"gpt-mini, {CONVERGE_STEPS} steps at {amp}")
        cmd = [os.path.join(build, "apps", "troupe-gpt"), "--steps", str(CONVERGE_STEPS), "--eval-every",
               str(CONVERGE_STEPS), "--amp", amp]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        final[amp] = json.loads(out.strip().splitlines()[-1])
    o0, o1, o2, o3 = final["O0"], final["O1"], final["O2"], final["O3"]
    emit({"bench": "gpt-converge-amp", "steps": CONVERGE_STEPS, "o0_train_loss": o0["train_loss"],
          "o1_train_loss": o1["train_loss"], "o2_train_loss": o2["train_loss"], "o0_val_loss": o0["val_loss"],
          "o3_train_loss": o3["train_loss"], "o1_val_loss": o1["val_loss"], "o2_val_loss": o2["val_loss"],
          "o3_val_loss": o3["val_loss"],
          "val_loss_rel_diff": round((o2["val_loss"] - o0["val_loss"]) / o0["val_loss"], 6),
          "o1_val_loss_rel_diff": round((o1["val_loss"] - o0["val_loss"]) / o0["val_loss"], 6),
          "o3_val_loss_rel_diff": round((o3["val_loss"] - o0["val_loss"]) / o0["val_loss"], 6),
          "o0_ms_per_step": o0["ms_per_step"], "o1_ms_per_step": o1["ms_per_step"],
          "o2_ms_per_step": o2["ms_per_step"], "o3_ms_per_step": o3["ms_per_step"]})


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    env = dict(os.environ)
    for threads in sorted({1, os.cpu_count() or 1}):
        for workload in WORKLOADS:
            log(f"{workload[0]}, {threads} thread(s)")
            line = measure(build, env, threads, *workload)
            if workload[0] == "gpt-train-amp" and native_isa() != "none":
                log(f"gpt-train-floor, {threads} thread(s)")
                floor(build, env, threads, line)
    converge(build, env)


if __name__ == "__main__":
    main()
