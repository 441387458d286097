#!/usr/bin/env python3
"""bench/run jit: what graph mode buys, the apps' workloads at each JIT level, runs alternating in
one invocation (ROUNDS rounds, medians), next to PyTorch's own inference modes. One JSON line per
measurement on stdout:
  sr-infer-jit   sr-lite on one image (128 and 256 pixels): Troupe at JIT_LEVEL 0/1/2/3 against the
                 fastest of PyTorch eager, channels_last and jit.trace+freeze+optimize_for_inference,
                 each with its best thread setting for the core count (as bench/run vs-torch picks)
  gpt-forward-jit, gpt-train-jit   gpt-mini logits and training step at JIT_LEVEL 0/1/3
  jit-pass-gain  per level-3 pass, the workload at level 3 with that pass switched off
                 (TROUPE_DISABLE_PASSES) against the full level 3, at the machine's core count
Peak bytes and allocator calls per step come from the Troupe side (bench/jit_bench.cpp).
"""
import json, os, statistics, subprocess, sys

ROUNDS = 3
TORCH_PYTHON = "/usr/bin/python3"
TORCH_VARIANTS = ["eager", "channels_last", "jit-freeze"]


# The CPU every line ran on: its model and the widest ISA it offers (set by main()).
MACHINE = {}


def emit(line):
    print(json.dumps({**line, **MACHINE}), flush=True)


def machine():
    with open("/proc/cpuinfo") as f:
        info = f.read()
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "unknown")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    isa = next((name for flag, name in (("amx_tile", "avx512-amx"), ("avx512_bf16", "avx512-bf16"),
                                          ("avx512f", "avx512"), ("avx2", "avx2")) if flag in flags), "other")
    return {"cpu": model, "isa": isa}


def log(msg):
    print(f"jit: {msg}", file=sys.stderr, flush=True)


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def troupe_env(env):
    """Troupe's runs as docs/EMBEDDING.md says to run more than one BLAS thread a product: with
    passive OpenMP threads, which otherwise spin on the cores of the kernels' pool after each product."""
    return {**env, "OMP_WAIT_POLICY": "PASSIVE"}


def troupe(build, workload, level, threads, size=128, steps=6):
    return [os.path.join(build, "bench", "troupe-bench-jit"), workload, str(level), str(threads), str(size), str(steps)]


def torch_settings(threads):
    if threads == 1:
        return [("torch 1, BLAS 1", 1, {"OPENBLAS_NUM_THREADS": "1"})]
    return [(f"torch {threads}, BLAS {threads}", threads, {"OPENBLAS_NUM_THREADS": str(threads)}),
            (f"torch 1, BLAS {threads}", 1, {"OPENBLAS_NUM_THREADS": str(threads)})]


def alternate(runs):
    """ROUNDS rounds of every run in turn; for each run the result of its median round."""
    results = [[] for _ in runs]
    for _ in range(ROUNDS):
        for k, run in enumerate(runs):
            results[k].append(run())
    return [sorted(r, key=lambda x: x["ms"])[len(r) // 2] for r in results]


def sr_infer(build, env, threads, size):
    steps = 6 if size <= 128 else 3
    # PyTorch's fastest variant and thread setting, from one try each.
    tried = []
    for variant in TORCH_VARIANTS:
        for name, th, extra in torch_settings(threads):
            cmd = [TORCH_PYTHON, os.path.join(os.path.dirname(__file__), "torch_workloads.py"), "sr-infer", str(th),
                   "relu", str(steps), str(size), variant]
            tried.append((run_json(cmd, {**env, **extra})["ms"], f"{variant}, {name}", cmd, {**env, **extra}))
    _, torch_name, torch_cmd, torch_env = min(tried, key=lambda t: t[0])
    levels = [0, 1, 2, 3]
    runs = [lambda l=l: run_json(troupe(build, "sr-infer", l, threads, size, steps), troupe_env(env)) for l in levels]
    runs.append(lambda: run_json(torch_cmd, torch_env))
    *ours, theirs = alternate(runs)
    line = {"bench": "sr-infer-jit", "size": size, "threads": threads}
    for l, r in zip(levels, ours):
        line[f"jit{l}_ms"] = round(r["ms"], 2)
    line.update({"torch_best_ms": round(theirs["ms"], 2), "torch_best": torch_name,
                 "speedup_jit3_vs_jit0": round(ours[0]["ms"] / ours[3]["ms"], 3),
                 "ratio_vs_torch_best": round(ours[3]["ms"] / theirs["ms"], 3),
                 "peak_bytes_jit0": ours[0]["peak_bytes"], "peak_bytes_jit1": ours[1]["peak_bytes"],
                 "peak_bytes_jit3": ours[3]["peak_bytes"], "allocs_per_step_jit1": ours[1]["allocs_per_step"],
                 "allocs_per_step_jit3": ours[3]["allocs_per_step"]})
    emit(line)


def gpt(build, env, threads, workload):
    levels = [0, 1, 3]
    ours = alternate([lambda l=l: run_json(troupe(build, workload, l, threads, 128, 4), troupe_env(env)) for l in levels])
    line = {"bench": f"{workload}-jit", "threads": threads}
    for l, r in zip(levels, ours):
        line[f"jit{l}_ms"] = round(r["ms"], 2)
    line["ratio_jit3_vs_jit1"] = round(ours[2]["ms"] / ours[1]["ms"], 3)
    for l, r in zip(levels, ours):
        line[f"peak_bytes_jit{l}"] = r["peak_bytes"]
    for l, r in zip(levels, ours):
        line[f"allocs_per_step_jit{l}"] = r["allocs_per_step"]
    line["allocs_per_step"] = ours[2]["allocs_per_step"]
    emit(line)


PASS_GAINS = {  # the level-3 passes that act on each workload
    ("sr-infer", 128): ["conv-algorithm-choice", "layout-choice", "conv-relu-fusion", "conv-residual-fusion",
                        "memory-planning"],
    ("gpt-forward", 128): ["attention-fusion", "bias-gelu-fusion", "matmul-bias-fusion", "add-layer-norm-fusion",
                           "memory-planning"],
    ("gpt-train", 128): ["attention-fusion", "bias-gelu-fusion", "matmul-bias-fusion", "add-layer-norm-fusion",
                         "recomputation", "memory-planning"],
}


def pass_gains(build, env, threads):
    for (workload, size), names in PASS_GAINS.items():
        cmd = troupe(build, workload, 3, threads, size, 4)
        runs = [lambda: run_json(cmd, troupe_env(env))]
        runs += [lambda n=n: run_json(cmd, {**env, "TROUPE_DISABLE_PASSES": n}) for n in names]
        full, *without = alternate(runs)
        for name, r in zip(names, without):
            emit({"bench": "jit-pass-gain", "workload": workload, "size": size, "threads": threads,
                  "pass": name, "jit3_ms": round(full["ms"], 2), "without_ms": round(r["ms"], 2),
                  "gain": round(r["ms"] / full["ms"], 3), "peak_bytes": full["peak_bytes"],
                  "peak_bytes_without": r["peak_bytes"]})


def main():
    build = sys.argv[1]
    MACHINE.update(machine())
    log(f"cpu: {MACHINE['cpu']} ({MACHINE['isa']})")
    env = dict(os.environ)
    for threads in sorted({1, os.cpu_count() or 1}):
        for size in (128, 256):
            log(f"sr-infer {size}, {threads} thread(s)")
            sr_infer(build, env, threads, size)
        for workload in ("gpt-forward", "gpt-train"):
            log(f"{workload}, {threads} thread(s)")
            gpt(build, env, threads, workload)
    threads = os.cpu_count() or 1
    log(f"per-pass gains, {threads} thread(s)")
    pass_gains(build, env, threads)


if __name__ == "__main__":
    main()
