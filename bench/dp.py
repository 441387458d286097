#!/usr/bin/env python3
"""bench/run dp: data-parallel gpt-mini training steps, 2 ranks on this host (troupe-launch, UCX over
shared memory, and as two "hosts" in network namespaces joined by a 1 Gbit/s link (bench/netns.sh,
UCX over TCP; needs root), 1 scheduler thread per rank, per-rank batch 8), GRAD_MODE=advanced (buckets
all-reduced during backward, parallel clip) against standard (tensor-by-tensor AllReduce after the
step, naive clip), alternating (on the link for fusion thresholds 64/4/2/1 MiB); a fusion-threshold
sweep over shared memory; and the scaling efficiency of DP=2 against
one process at the same per-rank batch, next to torch DDP (gloo) measured the same way; and the
buckets troupe-gpt sizes from the measured link when --comm-fusion-mb is not given ("auto"):
against the 64 MiB default over shared memory, advanced against standard over the link. One JSON
line per measurement. usage: dp.py BUILD [scaling|auto]   (only the scaling, or only the auto rows;
gradient compression's rows are bench/dp_compress.py's: bench/run dp compress)"""
import json, os, socket, statistics, subprocess, sys

from netns import HOST_A, HOST_B, on_hosts

ROUNDS, STEPS = 2, 12
NETNS_ROUNDS = 3  # the link rows vary more from run to run (TCP, tc) than the shared-memory ones


def run(build, env_extra, args):
    cmd = [os.path.join(build, "apps", "troupe-gpt"), "--steps", str(STEPS), "--eval-every", "100000",
           "--val-batches", "1", "--threads", "1", "--micro-batches", "1", "--amp", "O0", *args]
    env = dict(os.environ, **env_extra)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    rows = [json.loads(l[l.index("{"):]) for l in out.splitlines() if '"app":"troupe-gpt"' in l]
    return rows  # one per rank


def gpt_args(build, fusion):
    """fusion None: troupe-gpt sizes the buckets from the link it measures."""
    buckets = [] if fusion is None else ["--comm-fusion-mb", str(fusion)]
    return [os.path.join(build, "apps", "troupe-gpt"), "--dp", "2", *buckets, "--steps", str(STEPS),
            "--eval-every", "100000", "--val-batches", "1", "--threads", "1", "--micro-batches", "1", "--amp", "O0"]


def dp(build, mode, fusion, netns=False):
    if not netns:
        cmd = [os.path.join(build, "apps", "troupe-launch"), "-n", "2", "--", *gpt_args(build, fusion)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, GRAD_MODE=mode)).stdout
    else:
        # Two "hosts" (bench/netns.sh): one rank in each namespace, UCX over TCP through the 1 Gbit/s veth.
        out = on_hosts(gpt_args(build, fusion), [HOST_A, HOST_B], 29600, {"GRAD_MODE": mode})
    rows = [json.loads(l[l.index("{"):]) for l in out.splitlines() if '"app":"troupe-gpt"' in l]
    step = max(r["ms_per_step"] for r in rows)  # the job runs at its slowest rank
    comm = statistics.mean(r["comm_ms"] for r in rows)
    hidden = statistics.mean(r["hidden_fraction"] for r in rows)
    exposed = statistics.mean(r["exposed_comm_ms"] for r in rows)
    return step, comm, hidden, exposed


def versus_row(config, results):
    """One dp-advanced-vs-standard line from alternating runs (medians). The compute/communication
    ratio comes from the standard path, which computes first and communicates after."""
    med = lambda mode, i: statistics.median(x[i] for x in results[mode])
    adv, std, std_comm = med("advanced", 0), med("standard", 0), med("standard", 1)
    return {"bench": "dp-advanced-vs-standard", "config": config, "advanced_ms": round(adv, 2), "standard_ms": round(std, 2),
            "speedup": round(std / adv, 3), "comm_ms": round(med("advanced", 1), 2), "standard_comm_ms": round(std_comm, 2),
            "hidden_fraction": round(med("advanced", 2), 3), "exposed_comm_ms": round(med("advanced", 3), 2),
            "compute_comm_ratio": round((std - std_comm) / std_comm, 2)}


def torch_ddp(world):
    here = os.path.dirname(os.path.abspath(__file__))
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    out = subprocess.run(["/usr/bin/python3", os.path.join(here, "torch_ddp.py"), str(world), str(port), str(STEPS)],
                         check=True, capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1")).stdout
    return json.loads(out.strip().splitlines()[-1])["ms"]


def scaling(build):
    singles, dps, t1, t2 = [], [], [], []
    for _ in range(ROUNDS):
        singles.append(run(build, {}, [])[0]["ms_per_step"])
        dps.append(dp(build, "advanced", 64)[0])
        t1.append(torch_ddp(1))
        t2.append(torch_ddp(2))
    single, dual = statistics.median(singles), statistics.median(dps)
    ts, td = statistics.median(t1), statistics.median(t2)
    print(json.dumps({"bench": "dp-scaling", "config": "shm-2ranks-1thread-per-rank", "single_ms": round(single, 2),
                      "dp2_ms": round(dual, 2), "efficiency": round(single / dual, 3), "torch_single_ms": round(ts, 2),
                      "torch_ddp2_ms": round(td, 2), "torch_ddp_efficiency": round(ts / td, 3)}), flush=True)


def auto_rows(build):
    """The link-sized buckets: over shared memory against today's 64 MiB default (alternating, medians),
    and over the 1 Gbit/s link advanced against standard (when root can make it)."""
    shm = {"auto": [], "default": []}
    for _ in range(ROUNDS + 1):
        shm["auto"].append(dp(build, "advanced", None))
        shm["default"].append(dp(build, "advanced", 64))
    med = lambda k, i: statistics.median(x[i] for x in shm[k])
    print(json.dumps({"bench": "dp-auto-buckets-vs-default", "config": "shm-2ranks", "auto_ms": round(med("auto", 0), 2),
                      "default_fusion64_ms": round(med("default", 0), 2), "ratio": round(med("auto", 0) / med("default", 0), 3),
                      "hidden_fraction_auto": round(med("auto", 2), 3), "hidden_fraction_default": round(med("default", 2), 3)}),
          flush=True)
    here = os.path.dirname(os.path.abspath(__file__))
    if subprocess.run([os.path.join(here, "netns.sh"), "up"], capture_output=True).returncode != 0:
        print(json.dumps({"bench": "dp-advanced-vs-standard", "config": "netns-1gbit-auto", "skipped": "needs root for ip netns and tc"}))
        return
    try:
        res = {"advanced": [], "standard": []}
        for _ in range(NETNS_ROUNDS):
            for mode in ("advanced", "standard"):
                res[mode].append(dp(build, mode, None if mode == "advanced" else 64, netns=True))
        print(json.dumps(versus_row("netns-1gbit-auto", res)), flush=True)
    finally:
        subprocess.run([os.path.join(here, "netns.sh"), "down"])


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    if len(sys.argv) > 2 and sys.argv[2] == "scaling":
        return scaling(build)
    if len(sys.argv) > 2 and sys.argv[2] == "auto":
        return auto_rows(build)
    results = {"advanced": [], "standard": []}
    for _ in range(ROUNDS):
        for mode in ("advanced", "standard"):
            results[mode].append(dp(build, mode, 64))
    print(json.dumps(versus_row("shm-2ranks-fusion64", results)), flush=True)
    for fusion in (1, 4, 16, 64):
        step, comm, hidden, exposed = dp(build, "advanced", fusion)
        print(json.dumps({"bench": "dp-fusion-sweep", "config": "shm-2ranks", "fusion_mb": fusion, "step_ms": round(step, 2),
                          "comm_ms": round(comm, 2), "hidden_fraction": round(hidden, 3), "exposed_comm_ms": round(exposed, 2),
                          "compute_comm_ratio": round((step - exposed) / comm, 2)}), flush=True)
    here = os.path.dirname(os.path.abspath(__file__))
    if subprocess.run([os.path.join(here, "netns.sh"), "up"], capture_output=True).returncode != 0:
        print(json.dumps({"bench": "dp-advanced-vs-standard", "config": "netns-1gbit", "skipped": "needs root for ip netns and tc"}))
    else:
        try:
            for fusion in (64, 4, 2, 1):
                res = {"advanced": [], "standard": []}
                for _ in range(NETNS_ROUNDS):
                    for mode in ("advanced", "standard"):
                        res[mode].append(dp(build, mode, fusion, netns=True))
                print(json.dumps(versus_row(f"netns-1gbit-fusion{fusion}", res)), flush=True)
        finally:
            subprocess.run([os.path.join(here, "netns.sh"), "down"])
    auto_rows(build)
    scaling(build)


if __name__ == "__main__":
    main()
