#!/usr/bin/env python3
"""bench/run compare OLD_BUILD NEW_BUILD [ROUNDS]: two builds of Troupe side by side on this machine,
runs alternating (old, new, old, new, ...) within one invocation, so a change is measured against
the code before it under the same conditions. Prints one JSON line per measurement on stdout with
both medians and new/old:
- every line of troupe-bench-runtime (message cost, empty-op throughput, GPT-block step);
- the troupe side of bench/run vs-torch (gpt and sr training steps, gpt forward, sr inference) on
  1 scheduler thread, and on 2 with 2 micro-batches (1 for sr-infer), 1 kernel thread each;
- data-parallel gpt-mini steps of bench/run dp (2 ranks over shared memory, 1 thread each,
  GRAD_MODE=advanced) with 64 MiB and 1 MiB buckets: step time and the communication left exposed.
"""
import json, os, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dp import dp  # noqa: E402  (one data-parallel job, as bench/run dp runs it)

MEASURES = ("ns_per_message", "ops_per_s", "step_ms", "kernel_ms", "executor_ms", "ms")
WORKLOADS = ["gpt-train-step", "gpt-forward", "sr-train-step", "sr-infer"]


def log(msg):
    print(f"compare: {msg}", file=sys.stderr, flush=True)


def run_lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def key_of(line):
    return json.dumps({k: v for k, v in line.items() if k not in MEASURES and k != "overhead"}, sort_keys=True)


def alternate(builds, cmd_of, rounds):
    """{build: {line key: {measure: [values]}}} over `rounds` alternating runs."""
    seen = {b: {} for b in builds}
    for r in range(rounds):
        for b in builds:
            log(f"round {r + 1}/{rounds}: {b}")
            for line in run_lines(cmd_of(b)):
                slot = seen[b].setdefault(key_of(line), {})
                for m in MEASURES:
                    if m in line:
                        slot.setdefault(m, []).append(line[m])
    return seen


def report(bench, old, new, seen, rounds):
    for key, measures in seen[old].items():
        for m, values in measures.items():
            o, n = statistics.median(values), statistics.median(seen[new][key][m])
            print(json.dumps({"bench": bench, "line": json.loads(key), "measure": m, "old": round(o, 3),
                              "new": round(n, 3), "new_over_old": round(n / o, 3), "rounds": rounds}), flush=True)


def vs_torch_cmd(build, workload, threads):
    mb = 1 if workload == "sr-infer" or threads == 1 else 2
    return [os.path.join(build, "bench", "troupe-bench-vs-torch"), workload, str(threads), "1", str(mb), "relu"]


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: bench/run compare OLD_BUILD NEW_BUILD [ROUNDS]")
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    builds = [old, new]
    seen = alternate(builds, lambda b: [os.path.join(b, "bench", "troupe-bench-runtime")], rounds)
    report("compare-runtime", old, new, seen, rounds)
    for threads in (1, 2):
        for workload in WORKLOADS:
            seen = alternate(builds, lambda b: vs_torch_cmd(b, workload, threads), rounds)
            report("compare-vs-torch", old, new, seen, rounds)
    for fusion in (64, 1):
        runs = {b: [] for b in builds}
        for r in range(rounds):
            for b in builds:
                log(f"dp, {fusion} MiB buckets, round {r + 1}/{rounds}: {b}")
                runs[b].append(dp(b, "advanced", fusion))
        for i, measure in ((0, "step_ms"), (3, "exposed_comm_ms")):
            o, n = (statistics.median(x[i] for x in runs[b]) for b in builds)
            print(json.dumps({"bench": "compare-dp", "line": {"config": "shm-2ranks", "fusion_mb": fusion},
                              "measure": measure, "old": round(o, 3), "new": round(n, 3),
                              "new_over_old": round(n / o, 3) if o else None, "rounds": rounds}), flush=True)


if __name__ == "__main__":
    main()
