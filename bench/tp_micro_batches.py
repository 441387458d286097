#!/usr/bin/env python3
"""bench/run tp-micro-batches [OLD_BUILD] NEW_BUILD: whether a tensor-parallel step's second
micro-batch computes while the first one's collectives are on the wire. gpt-mini (the defaults,
f32, JIT_LEVEL=3, batch 8 per replica) trained as tp2 and dp2 x tp2 under troupe-launch (UCX over
shared memory), with 1 and 2 micro-batches, on 1 and 2 scheduler threads per rank; and as tp2 with
its two ranks on two "hosts" joined by a 1 Gbit/s link (bench/netns.sh; needs root, else skipped),
one scheduler thread each, where a rank's cores idle while its activations are on the wire. With
two builds (before and after a change) their runs alternate, ROUNDS times each (env, default 3);
one JSON line per build and setting with the median step time (ms_per_step of troupe-gpt's final
line) and its runs.
usage: tp_micro_batches.py [OLD_BUILD] NEW_BUILD"""
import json, os, statistics, subprocess, sys

from jit import machine  # the CPU and its instruction set, as every benchmark line names them
from netns import HOST_A, HOST_B, on_hosts

STEPS = int(os.environ.get("STEPS", "30"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
MESHES = [("tp2", 2, ["--tp", "2"]), ("dp2xtp2", 4, ["--dp", "2", "--tp", "2", "--comm-fusion-mb", "4"])]


def step_ms(build, ranks, mesh, micro_batches, threads, netns=False):
    cmd = [os.path.join(build, "apps", "troupe-gpt"), "--steps", str(STEPS), "--eval-every", "0", "--val-batches", "1",
           "--amp", "O0", "--micro-batches", str(micro_batches), "--threads", str(threads), *mesh]
    if netns:
        out = on_hosts(cmd, [HOST_A, HOST_B], 29651, {"JIT_LEVEL": "3", "TROUPE_TIMEOUT": "300"})
    else:
        cmd = [os.path.join(build, "apps", "troupe-launch"), "-n", str(ranks), "--timeout", "300", "--", *cmd]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, JIT_LEVEL="3")).stdout
    line = next(l for l in out.splitlines() if '"app":"troupe-gpt"' in l)
    return json.loads(line[line.index("{"):])["ms_per_step"]


def settings():
    """(name, ranks, mesh flags, threads per rank, netns) of every setting measured."""
    out = [(name, ranks, mesh, threads, False) for name, ranks, mesh in MESHES for threads in (1, 2)]
    here = os.path.dirname(os.path.abspath(__file__))
    if subprocess.run([os.path.join(here, "netns.sh"), "up"], capture_output=True).returncode == 0:
        out.append(("tp2-two-hosts-1gbit", 2, ["--tp", "2"], 1, True))
    else:
        print("tp-micro-batches: no network namespaces (needs root); the two-host setting is skipped", file=sys.stderr)
    return out


def main():
    builds = sys.argv[1:]
    if not builds:
        sys.exit(__doc__)
    runs = {}
    measured = settings()
    try:
        for r in range(ROUNDS):
            for name, ranks, mesh, threads, netns in measured:
                for mb in (1, 2):
                    for build in builds:
                        ms = step_ms(build, ranks, mesh, mb, threads, netns)
                        runs.setdefault((build, name, threads, mb), []).append(ms)
                        print(f"tp-micro-batches: round {r + 1} {build} {name} threads {threads} mb {mb}: {ms:.1f} ms",
                              file=sys.stderr, flush=True)
    finally:
        if any(netns for *_, netns in measured):
            subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns.sh"), "down"])
    for (build, name, threads, mb), ms in runs.items():
        print(json.dumps({"bench": "tp-micro-batches", **machine(), "build": build, "mesh": name, "threads_per_rank": threads,
                          "micro_batches": mb, "step_ms": round(statistics.median(ms), 1), "runs": [round(x, 1) for x in ms]}))


if __name__ == "__main__":
    main()
