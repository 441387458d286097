#!/usr/bin/env python3
"""bench/run hybrid: a GPT of about 100M parameters (d_model 1024, 8 layers, 16 heads, d_ff 4096,
seq 128, byte vocabulary) on 4 ranks, planned and trained as dp4, dp2 x tp2, tp4 and dp4 + ZeRO-1
at a global batch of 4 sequences, JIT_LEVEL=1 (the traced graph, the same in every plan) and f32 for
all, one scheduler thread per rank. Per plan: the measured step time and memory
of rank 0 (the allocator's peak through the steps; the parameter and optimizer bytes it holds) next
to troupe-gpt --plan-only's prediction (parameters, gradients, optimizer state, activations;
compute, communication and update time).

Two settings: the 4 ranks on this machine (troupe-launch, UCX over shared memory), and on two
"hosts" of 2 ranks each (network namespaces joined by a 1 Gbit/s link, bench/netns.sh; UCX over TCP;
needs root), where dp2 x tp2 keeps each tp pair within a host and the other plans' rings cross the
link. The cost model's GFLOP/s is calibrated on one process running the same model at batch 1 (its
measured step, less the predicted update, against the plan's FLOPs), with the update's measured
bandwidth, both scaled by this machine's cores shared among the 4 ranks; the links at what a 64 MiB
all-reduce among the ranks reaches and what a 4 KiB one takes (troupe-bench-allreduce). One JSON
line per plan and setting; then per setting the mesh troupe-gpt chose itself when given neither
--dp nor --tp (its links measured per candidate mesh), against the fastest plan measured.
usage: hybrid.py BUILD"""
import json, os, subprocess, sys

from jit import machine  # the CPU and its instruction set, as every benchmark line names them
from netns import HOST_A, HOST_B, on_hosts

MODEL = ["--d-model", "1024", "--layers", "8", "--heads", "16", "--d-ff", "4096", "--seq", "128"]
RANKS, GLOBAL_BATCH, STEPS = 4, 4, 4
PLANS = [("dp4", ["--dp", "4", "--tp", "1"]), ("dp2xtp2", ["--dp", "2", "--tp", "2"]), ("tp4", ["--dp", "1", "--tp", "4"]),
         ("dp4-zero1", ["--dp", "4", "--tp", "1", "--zero", "1"])]
# The two "hosts" (bench/netns.py): ranks 0 and 1 on one, 2 and 3 on the other.
HOSTS = [HOST_A, HOST_A, HOST_B, HOST_B]
NETNS_ENV = {"JIT_LEVEL": "1", "TROUPE_TIMEOUT": "600"}


def gpt(build):
    return os.path.join(build, "apps", "troupe-gpt")


def json_lines(out, key):
    return [json.loads(l[l.index("{"):]) for l in out.splitlines() if key in l]


def plan(build, args, batch, gflops, update_gbps, link, tp_link=None):
    """link, tp_link: (GB/s, us) of every mesh axis, and of the tp axis when it differs."""
    tp = ["--tp-link-gbps", str(tp_link[0]), "--tp-link-latency-us", str(tp_link[1])] if tp_link else []
    out = subprocess.run([gpt(build), *MODEL, "--plan-only", "--batch", str(batch), "--gflops", str(gflops),
                          "--update-gbps", str(update_gbps), "--link-gbps", str(link[0]), "--link-latency-us", str(link[1]),
                          *tp, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def train(build, args, batch, ranks, netns=False):
    cmd = [gpt(build), *MODEL, "--batch", str(batch), "--steps", str(STEPS), "--eval-every", "0", "--val-batches", "1",
           "--threads", "1", "--micro-batches", "1", "--amp", "O0", *args]
    if netns:
        out = on_hosts(cmd, HOSTS[:ranks], 29650, NETNS_ENV)
    else:
        if ranks > 1:
            cmd = [os.path.join(build, "apps", "troupe-launch"), "-n", str(ranks), "--timeout", "600", "--", *cmd]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, JIT_LEVEL="1")).stdout
    rows = json_lines(out, '"app":"troupe-gpt"')
    rank0 = next(r for r in rows if r.get("rank", 0) == 0)
    rank0["slowest_ms_per_step"] = max(r["ms_per_step"] for r in rows)
    return rank0


def measured_link(build, hosts=None):
    """(GB/s each rank sends in a 64 MiB all-reduce, 2 (n-1)/n of the buffer, the best of 3; us of a
    4 KiB one) among RANKS ranks of this machine, or among the ranks placed on `hosts`."""
    bench = [os.path.join(build, "bench", "troupe-bench-allreduce"), "3", "64", "0.004"]
    if hosts is None:
        n = RANKS
        out = subprocess.run([os.path.join(build, "apps", "troupe-launch"), "-n", str(n), "--", *bench],
                             check=True, capture_output=True, text=True).stdout
    else:
        n = len(hosts)
        out = on_hosts(bench, hosts, 29651, NETNS_ENV)
    rows = json_lines(out, '"impl"')
    large, small = next(r for r in rows if r["bytes"] > 1 << 20), next(r for r in rows if r["bytes"] < 1 << 20)
    return large["bytes"] * 2 * (n - 1) / n / (large["ms"] / 1e3) / 1e9, small["ms"] * 1e3


def measure(build, setting, per_rank, update_gbps, link, hybrid_links, netns):
    """link: every plan's; hybrid_links: dp2 x tp2's (dp, tp) when they differ from it. Then the
    mesh troupe-gpt searches itself (neither --dp nor --tp; the same compute figures, its own
    measurement of each candidate's links) against the fastest of the plans measured."""
    mib = lambda b: round(b / 2**20, 1)
    measured = {}
    for name, args in PLANS:
        dp = int(args[args.index("--dp") + 1])
        batch = GLOBAL_BATCH // dp
        links = hybrid_links if name == "dp2xtp2" and hybrid_links else (link, None)
        p = plan(build, args, batch, per_rank, update_gbps, *links)
        m = train(build, args, batch, RANKS, netns)
        mem = p["memory_per_rank"]
        print(json.dumps({
            "bench": "hybrid", "setting": setting, "plan": name, "model": "d1024-l8-h16-ff4096-seq128", "params": m["params"],
            "global_batch": GLOBAL_BATCH,
            "predicted_ms": round(p["predicted_ms"], 1), "predicted_compute_ms": round(p["predicted_compute_ms"], 1),
            "predicted_comm_ms": round(p["predicted_communication_ms"], 1),
            "predicted_optimizer_ms": round(p["predicted_optimizer_ms"], 1),
            "measured_ms": m["slowest_ms_per_step"], "time_ratio": round(m["slowest_ms_per_step"] / p["predicted_ms"], 3),
            "predicted_mib": {k: mib(v) for k, v in mem.items()},
            "measured_peak_mib": mib(m["step_peak_bytes"]),
            "memory_ratio": round(m["step_peak_bytes"] / mem["total"], 3),
            "held_parameter_mib": mib(m["held_parameter_bytes"]), "held_optimizer_mib": mib(m["held_optimizer_bytes"]),
            "measured_dp_comm_ms": m["comm_ms"], "measured_dp_exposed_comm_ms": m["exposed_comm_ms"],
            "train_loss": m["train_loss"], **machine()}), flush=True)
        if name != "dp4-zero1":
            measured[f"dp={dp} x tp={RANKS // dp}"] = m["slowest_ms_per_step"]
    s = train(build, ["--gflops", str(per_rank), "--update-gbps", str(update_gbps)], GLOBAL_BATCH, RANKS, netns)
    chosen = f"dp={s['dp']} x tp={s['tp']}"
    fastest = min(measured, key=measured.get)
    print(json.dumps({"bench": "hybrid-searched", "setting": setting, "chosen": chosen, "measured_ms": s["slowest_ms_per_step"],
                      "fastest_measured": fastest, "fastest_ms": measured[fastest],
                      "chosen_is_fastest": chosen == fastest, "train_loss": s["train_loss"], **machine()}), flush=True)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    # Calibration: one process, one thread, batch 1. The update's bandwidth is troupe-gpt's own
    # measurement; the step's compute is what is left of the measured step.
    single = train(build, [], 1, 1)
    one = plan(build, ["--dp", "1", "--tp", "1"], 1, 1.0, 0, (10, 20))
    gflops = one["predicted_compute_ms"] / (single["ms_per_step"] - one["predicted_optimizer_ms"])
    share = min(1.0, os.cpu_count() / RANKS)  # of the machine's cores and memory bandwidth, per rank
    per_rank, update_gbps = gflops * share, one["update_gbps"] * share
    shm = measured_link(build)
    print(json.dumps({"bench": "hybrid-calibration", "single_ms_per_step": single["ms_per_step"],
                      "gflops_one_thread": round(gflops, 1), "gflops_per_rank": round(per_rank, 1),
                      "update_gbps_one_thread": round(one["update_gbps"], 1), "update_gbps_per_rank": round(update_gbps, 1),
                      "shm_link_gbps": round(shm[0], 2), "shm_link_us": round(shm[1], 1), "cores": os.cpu_count(),
                      "ranks": RANKS, **machine()}), flush=True)
    measure(build, "shm-4ranks", per_rank, update_gbps, shm, None, False)
    here = os.path.dirname(os.path.abspath(__file__))
    if subprocess.run([os.path.join(here, "netns.sh"), "up"], capture_output=True).returncode != 0:
        print(json.dumps({"bench": "hybrid", "setting": "netns-1gbit-2hosts", "skipped": "needs root for ip netns and tc"}))
        return
    try:
        across = measured_link(build, HOSTS)                 # every ring of 4 crosses the link twice
        within = measured_link(build, HOSTS[:2])             # a pair on one host, over the loopback
        print(json.dumps({"bench": "hybrid-links", "setting": "netns-1gbit-2hosts", "across_gbps": round(across[0], 3),
                          "across_us": round(across[1], 1), "within_host_gbps": round(within[0], 2),
                          "within_host_us": round(within[1], 1)}), flush=True)
        # dp2 x tp2: each tp pair within a host; its two dp pairs cross the link at once, half of it each.
        measure(build, "netns-1gbit-2hosts", per_rank, update_gbps, across, ((across[0] / 2, across[1]), within), True)
    finally:
        subprocess.run([os.path.join(here, "netns.sh"), "down"])


if __name__ == "__main__":
    main()
