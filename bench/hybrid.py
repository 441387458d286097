#!/usr/bin/env python3
"""bench/run hybrid: a GPT of about 100M parameters (d_model 1024, 8 layers, 16 heads, d_ff 4096,
seq 128, byte vocabulary) on 4 ranks of this machine (troupe-launch, UCX over shared memory, one
scheduler thread per rank), planned and trained as dp4, dp2 x tp2, tp4 and dp4 + ZeRO-1 at a global
batch of 4 sequences, JIT_LEVEL=1 and f32 for all (tensor parallelism runs the traced graph without
passes). Per plan: the measured step time and memory of rank 0 (the allocator's peak through the
steps; the parameter and optimizer bytes it holds) next to troupe-gpt --plan-only's prediction
(parameters, gradients, optimizer state, activations; compute, communication and update time). The
cost model's GFLOP/s is calibrated on one process running the same model at batch 1 (its measured
step, less the predicted update, against the plan's FLOPs), and with the update's measured bandwidth
scaled by this machine's cores shared among the 4 ranks; the links at the bandwidth a 64 MiB
all-reduce among the 4 ranks reaches (troupe-bench-allreduce) and 20 us. One JSON line per plan.
usage: hybrid.py BUILD"""
import json, os, subprocess, sys

from jit import machine  # the CPU and its instruction set, as every benchmark line names them

MODEL = ["--d-model", "1024", "--layers", "8", "--heads", "16", "--d-ff", "4096", "--seq", "128"]
RANKS, GLOBAL_BATCH, STEPS = 4, 4, 4
PLANS = [("dp4", ["--dp", "4", "--tp", "1"]), ("dp2xtp2", ["--dp", "2", "--tp", "2"]), ("tp4", ["--dp", "1", "--tp", "4"]),
         ("dp4-zero1", ["--dp", "4", "--tp", "1", "--zero", "1"])]


def gpt(build):
    return os.path.join(build, "apps", "troupe-gpt")


def plan(build, args, batch, gflops, update_gbps=0, link=10):
    out = subprocess.run([gpt(build), *MODEL, "--plan-only", "--batch", str(batch), "--gflops", str(gflops),
                          "--update-gbps", str(update_gbps), "--link-gbps", str(link), "--link-latency-us", "20", *args],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def train(build, args, batch, ranks):
    cmd = [gpt(build), *MODEL, "--batch", str(batch), "--steps", str(STEPS), "--eval-every", "0", "--val-batches", "1",
           "--threads", "1", "--micro-batches", "1", "--amp", "O0", *args]
    if ranks > 1:
        cmd = [os.path.join(build, "apps", "troupe-launch"), "-n", str(ranks), "--timeout", "600", "--", *cmd]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, JIT_LEVEL="1")).stdout
    rows = [json.loads(l[l.index("{"):]) for l in out.splitlines() if '"app":"troupe-gpt"' in l]
    rank0 = next(r for r in rows if r.get("rank", 0) == 0)
    rank0["slowest_ms_per_step"] = max(r["ms_per_step"] for r in rows)
    return rank0


def link_gbps(build):
    """The ranks' link as the cost model sees it: GB/s each rank sends in a 64 MiB all-reduce among RANKS
    processes of this machine (2 (n-1)/n of the buffer), the best of 3."""
    out = subprocess.run([os.path.join(build, "apps", "troupe-launch"), "-n", str(RANKS), "--",
                          os.path.join(build, "bench", "troupe-bench-allreduce"), "3", "64"],
                         check=True, capture_output=True, text=True).stdout
    r = next(json.loads(l[l.index("{"):]) for l in out.splitlines() if '"impl"' in l)
    return r["bytes"] * 2 * (RANKS - 1) / RANKS / (r["ms"] / 1e3) / 1e9


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    mib = lambda b: round(b / 2**20, 1)
    # Calibration: one process, one thread, batch 1: GFLOP/s = the plan's FLOPs / the measured step.
    single = train(build, [], 1, 1)
    # The update's bandwidth is troupe-gpt's own measurement; the step's compute is what is left.
    one = plan(build, ["--dp", "1", "--tp", "1"], 1, 1.0)
    flops_ms = one["predicted_compute_ms"]  # ms at 1 GFLOP/s
    gflops = flops_ms / (single["ms_per_step"] - one["predicted_optimizer_ms"])
    share = min(1.0, os.cpu_count() / RANKS)  # of the machine's cores and memory bandwidth, per rank
    per_rank, update_gbps = gflops * share, one["update_gbps"] * share
    link = link_gbps(build)
    print(json.dumps({"bench": "hybrid-calibration", "single_ms_per_step": single["ms_per_step"],
                      "gflops_one_thread": round(gflops, 1), "gflops_per_rank": round(per_rank, 1),
                      "update_gbps_one_thread": round(one["update_gbps"], 1), "update_gbps_per_rank": round(update_gbps, 1),
                      "link_gbps": round(link, 2), "link_latency_us": 20, "cores": os.cpu_count(), "ranks": RANKS,
                      **machine()}), flush=True)
    for name, args in PLANS:
        dp = int(args[args.index("--dp") + 1]) if "--dp" in args else 1
        batch = GLOBAL_BATCH // dp
        p = plan(build, args, batch, per_rank, update_gbps, link)
        m = train(build, args, batch, RANKS)
        mem = p["memory_per_rank"]
        print(json.dumps({
            "bench": "hybrid", "plan": name, "model": "d1024-l8-h16-ff4096-seq128", "params": m["params"],
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


if __name__ == "__main__":
    main()
