#!/usr/bin/env python3
"""bench/run vs-torch: the apps' workloads in Troupe and in PyTorch on the same machine, runs
alternating in one invocation. For each thread count each side first tries its candidate
settings once and keeps its fastest; then ROUNDS alternating rounds are timed and the medians
compared. Prints one JSON line per workload, thread count and environment on stdout.

PyTorch gets its best setting for the cores: this Debian build calls the system OpenBLAS, which
keeps its own thread count, so torch's and OpenBLAS's thread counts are both set explicitly, and
on two cores torch 1 / BLAS 2 and OMP_WAIT_POLICY=PASSIVE are tried too.
"""
import json, os, statistics, subprocess, sys

ROUNDS = 3
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch
WORKLOADS = ["gpt-train-step", "gpt-forward", "sr-train-step", "sr-infer"]


def log(msg):
    print(f"vs-torch: {msg}", file=sys.stderr, flush=True)


def measure(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["ms"]


def troupe_settings(threads, workload):
    if threads == 1:
        return [("1 scheduler thread, 1 kernel thread", (1, 1, 1))]
    mb = 1 if workload == "sr-infer" else 2  # one image cannot be split
    return [(f"{threads} scheduler threads, 1 kernel thread, {mb} micro-batches", (threads, 1, mb)),
            (f"1 scheduler thread, {threads} kernel threads", (1, threads, 1))]


def torch_settings(threads):
    if threads == 1:
        return [("torch 1, BLAS 1", 1, {"OPENBLAS_NUM_THREADS": "1"})]
    return [(f"torch {threads}, BLAS {threads}", threads, {"OPENBLAS_NUM_THREADS": str(threads)}),
            (f"torch {threads}, BLAS {threads}, OMP_WAIT_POLICY=PASSIVE", threads,
             {"OPENBLAS_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}),
            (f"torch 1, BLAS {threads}", 1, {"OPENBLAS_NUM_THREADS": str(threads)})]


def troupe_cmd(build, workload, cfg, act="relu"):
    return [os.path.join(build, "bench", "troupe-bench-vs-torch"), workload, *map(str, cfg), act]


def torch_cmd(workload, threads, act="relu"):
    return [TORCH_PYTHON, os.path.join(os.path.dirname(__file__), "torch_workloads.py"), workload, str(threads), act]


def best(candidates, run):
    """Runs each candidate once; returns (name, candidate) of the fastest."""
    timed = [(run(c), name, c) for name, c in candidates]
    ms, name, c = min(timed, key=lambda t: t[0])
    return name, c


def alternate(runs):
    """ROUNDS rounds of every run in turn; the median of each."""
    results = [[] for _ in runs]
    for _ in range(ROUNDS):
        for k, run in enumerate(runs):
            results[k].append(run())
    return [statistics.median(r) for r in results]


def compare(build, env_name, base_env, threads):
    for workload in WORKLOADS:
        t_name, t_cfg = best(troupe_settings(threads, workload),
                             lambda cfg: measure(troupe_cmd(build, workload, cfg), base_env))
        p_name, p_cfg = best([(n, (th, e)) for n, th, e in torch_settings(threads)],
                             lambda c: measure(torch_cmd(workload, c[0]), {**base_env, **c[1]}))
        troupe_ms, torch_ms = alternate([
            lambda: measure(troupe_cmd(build, workload, t_cfg), base_env),
            lambda: measure(torch_cmd(workload, p_cfg[0]), {**base_env, **p_cfg[1]})])
        print(json.dumps({"bench": workload, "threads": threads, "env": env_name, "troupe_ms": round(troupe_ms, 2),
                          "torch_ms": round(torch_ms, 2), "ratio": round(troupe_ms / torch_ms, 3),
                          "troupe_setting": t_name, "torch_setting": p_name}), flush=True)
    # What the custom ReLU gradient costs per training step, here and as a PyTorch autograd.Function.
    t_cfg = troupe_settings(threads, "sr-train-step")[0][1]
    p_threads, p_env = torch_settings(threads)[-1][1:] if threads > 1 else torch_settings(1)[0][1:]
    relu, custom, torch_relu, torch_fn = alternate([
        lambda: measure(troupe_cmd(build, "sr-train-step", t_cfg, "relu"), base_env),
        lambda: measure(troupe_cmd(build, "sr-train-step", t_cfg, "custom-relu"), base_env),
        lambda: measure(torch_cmd("sr-train-step", p_threads, "relu"), {**base_env, **p_env}),
        lambda: measure(torch_cmd("sr-train-step", p_threads, "custom-relu-fn"), {**base_env, **p_env})])
    print(json.dumps({"bench": "sr-custom-relu-cost", "threads": threads, "env": env_name,
                      "troupe_relu_ms": round(relu, 2), "troupe_custom_relu_ms": round(custom, 2),
                      "troupe_cost": round(custom / relu - 1, 3), "torch_relu_ms": round(torch_relu, 2),
                      "torch_custom_fn_ms": round(torch_fn, 2), "torch_cost": round(torch_fn / torch_relu - 1, 3)}),
          flush=True)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    default = dict(os.environ)
    native = {k: v for k, v in default.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    envs = [("default", default), ("native", native)]
    if native == default:
        log("OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset here: the default environment is the native one")
        envs = [("default=native", default)]
    for env_name, env in envs:
        for threads in (1, 2):
            log(f"env {env_name}, {threads} thread(s)")
            compare(build, env_name, env, threads)


if __name__ == "__main__":
    main()
