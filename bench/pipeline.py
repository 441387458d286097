#!/usr/bin/env python3
"""bench/run pipeline: pipeline parallelism (troupe-gpt --pp) on the ranks of this machine
(troupe-launch, UCX over shared memory), by schedule (gpipe, 1f1b, zb-h1) and micro-batch count (4, 8; a replica runs at most one
micro-batch per row of its share of the global batch).

Per row: the measured step (the slowest rank's ms_per_step over the steps after the first) next to
troupe-gpt --plan-only's prediction (plan/pipeline_cost.hpp: each stage's micro-batch from its ops'
costs, its sends, update and dp all-reduce; (m + p - 1) micro-batch times of the slowest stage,
then its update), its GFLOP/s calibrated on one process's measured step at the same global batch
and micro-batches (and shared among the ranks beyond one per core), the links assumed (shared
memory 5 GB/s, 20 us; the namespaces' 1 Gbit/s, 100 us); each stage's idle fraction
of its last step from its trace (troupe-trace summary: no kernel running), against that theoretical
bubble; each stage's most micro-batches in flight, counted from its trace, against the schedule's
bound (1F1B: p - i; GPipe: m); each stage's measured step memory (JIT level 3's step memory
report: what the step's acts held at once) against the plan's (its gradients and the micro-batches
in flight's activations). One JSON line per row. Then, on the shared-memory link, the planner's
own choice for 2 ranks (troupe-gpt launched without --dp, --tp or --pp searches dp x tp x pp at
the micro-batches given) against every 2-rank mesh measured (dp2, tp2, pp2 with 1f1b).

usage: pipeline.py BUILD [MESHES [MODEL [LINKS]]]
  MESHES: comma-separated of pp2, pp4, dp2xpp2 (default pp2: this machine has 2 cores; 4 ranks share them)
  MODEL: d_model,layers,heads,d_ff,seq,batch (default 512,8,8,2048,128,8: a GPT of 25M parameters)
  LINKS: comma-separated of shm (troupe-launch on this machine) and netns (the two network-namespace
    hosts of bench/netns.sh at 1 Gbit/s, the first half of the ranks on one: a pipeline's middle
    boundary crosses the link, dp stays within a host; needs root); default shm"""
import collections, json, os, re, subprocess, sys, tempfile

from jit import machine  # the CPU and its instruction set, as every benchmark line names them
from netns import HOST_A, HOST_B, on_hosts

STEPS = 4
MESHES = {"pp2": (1, 2), "pp4": (1, 4), "dp2xpp2": (2, 2)}
LINKS = {"shm": ("5", "20"), "netns": ("0.125", "100")}  # GB/s and us the plans assume


def log(msg):
    print(f"pipeline: {msg}", file=sys.stderr, flush=True)


def in_flight(trace):
    """The most micro-batches alive at once in a rank's trace of its last step: each from its first
    op's kernels to the end of its last op's, leaving out the gradient stages' sums ("grad:" tracks)."""
    events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    sums = {e["tid"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
            and e["args"].get("name", "").startswith("grad:")}
    spans = {}
    for e in events:
        mb = e.get("args", {}).get("micro_batch")
        if e.get("ph") != "X" or e.get("name") != "compute" or mb is None or e["tid"] in sums:
            continue
        a, b = spans.get(mb, (e["ts"], e["ts"] + e["dur"]))
        spans[mb] = (min(a, e["ts"]), max(b, e["ts"] + e["dur"]))
    edges = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    alive = most = 0
    for _, change in edges:
        alive += change
        most = max(most, alive)
    return most


def model_flags(model):
    d, layers, heads, ff, seq, _ = model
    return ["--d-model", str(d), "--layers", str(layers), "--heads", str(heads), "--d-ff", str(ff), "--seq", str(seq)]


def plan(build, model, args):
    """troupe-gpt --plan-only's JSON line for `args`."""
    out = subprocess.run([os.path.join(build, "apps", "troupe-gpt"), *model_flags(model), "--plan-only", *args], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def train(build, model, ranks, args, trace=None, netns=False):
    cmd = [os.path.join(build, "apps", "troupe-gpt"), *model_flags(model), "--steps", str(STEPS), "--eval-every", "0",
           "--val-batches", "1", "--threads", "1", "--amp", "O0", *args]
    if trace:
        cmd += ["--trace", trace]
    if netns:
        outs = on_hosts(cmd, [HOST_A] * (ranks // 2) + [HOST_B] * (ranks - ranks // 2), 29660,
                        {"TROUPE_TIMEOUT": "600"}, per_rank=True)
    elif ranks > 1:
        launched = [os.path.join(build, "apps", "troupe-launch"), "-n", str(ranks), "--timeout", "600", "--", *cmd]
        stdout = subprocess.run(launched, check=True, capture_output=True, text=True).stdout
        # Each rank's lines start "[rank r] ".
        outs = ["\n".join(l.split("] ", 1)[1] for l in stdout.splitlines() if l.startswith(f"[rank {r}] ")) for r in range(ranks)]
    else:
        outs = [subprocess.run(cmd, check=True, capture_output=True, text=True).stdout]
    rows = [json.loads(l[l.index("{"):]) for out in outs for l in out.splitlines() if '"app":"troupe-gpt"' in l]
    # Each rank's step memory report.
    peaks = [float(m.group(1)) * 2**20 if m else 0.0
             for m in (re.search(r"troupe-gpt: memory: ([0-9.]+) MiB peak measured", out) for out in outs)]
    return rows, peaks


def main():
    build = sys.argv[1]
    meshes = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else ["pp2"]
    model = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else "512,8,8,2048,128,8").split(",")]
    links = sys.argv[4].split(",") if len(sys.argv) > 4 else ["shm"]
    if "netns" in links and subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns.sh"), "up"],
                                           capture_output=True).returncode != 0:
        print(json.dumps({"bench": "pipeline", "link": "netns-1gbit", "skipped": "needs root for ip netns and tc"}))
        links.remove("netns")
    batch = model[5]
    trace_bin = os.path.join(build, "apps", "troupe-trace")
    base = {"bench": "pipeline", **machine(), "model": "gpt d%d x%d heads %d ff %d seq %d" % tuple(model[:5]),
            "global_batch": batch}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write(("the quick brown fox jumps over the lazy dog. " * 4000))
        for link in links:
            for m in (4, 8):
                searched = {}  # the 2-rank rows' step, for the search's comparison
                log(f"one process, {m} micro-batches")
                rows, peaks = train(build, model, 1, ["--batch", str(batch), "--micro-batches", str(m), "--data", corpus])
                single = rows[0]["ms_per_step"]
                # The cost model's GFLOP/s: one process's measured step, less its predicted update, against its FLOPs.
                one = plan(build, model, ["--batch", str(batch), "--dp", "1", "--tp", "1", "--gflops", "50"])
                gflops = 50 * one["predicted_compute_ms"] / (single - one["predicted_optimizer_ms"])
                update_gbps = one["update_gbps"]
                print(json.dumps({**base, "link": "shm", "mesh": "single", "micro_batches": m, "step_ms": single,
                                  "calibrated_gflops": round(gflops, 2),
                                  "peak_bytes_max": max(peaks)}), flush=True)
                for mesh in meshes:
                    dp, pp = MESHES[mesh]
                    for schedule in ("gpipe", "1f1b", "zb-h1"):
                        log(f"{link} {mesh} {schedule}, {m} micro-batches")
                        trace = os.path.join(tmp, f"{mesh}-{schedule}-{m}.json")
                        rows, peaks = train(build, model, dp * pp,
                                            ["--batch", str(batch // dp), "--dp", str(dp), "--pp", str(pp), "--pp-schedule",
                                             schedule, "--micro-batches", str(m), "--data", corpus], trace, link == "netns")
                        ranks = [trace] + [trace.replace(".json", f".rank{r}.json") for r in range(1, dp * pp)]
                        summaries = json.loads(subprocess.run([trace_bin, "summary", *ranks, "--json"], check=True,
                                                              capture_output=True, text=True).stdout)
                        # Stage s's ranks are s*dp .. s*dp + dp - 1: each stage's figures from its first replica.
                        stage_ranks = [s * dp for s in range(pp)]
                        idle = [summaries[r]["idle_fraction"] for r in stage_ranks]
                        flight = [in_flight(ranks[r]) for r in stage_ranks]
                        runs = min(m, batch // dp)  # micro-batches a replica runs
                        bound = [runs if schedule == "gpipe" else pp - s for s in range(pp)]
                        step = max(r["ms_per_step"] for r in rows)
                        share = min(1.0, os.cpu_count() / (dp * pp))  # of a core, per rank
                        planned = plan(build, model, ["--batch", str(batch // dp), "--dp", str(dp), "--tp", "1", "--pp", str(pp),
                                                      "--pp-schedule", schedule, "--micro-batches", str(m),
                                                      "--gflops", str(gflops * share), "--update-gbps", str(update_gbps * share),
                                                      "--link-gbps", LINKS[link][0], "--link-latency-us", LINKS[link][1]])
                        predicted = planned["predicted_ms"]
                        if dp * pp == 2 and schedule == "1f1b":
                            searched[f"dp{dp}xtp1xpp{pp}"] = step
                        print(json.dumps({**base, "link": "shm" if link == "shm" else "netns-1gbit",
                                          "mesh": f"dp{dp}xtp1xpp{pp}", "schedule": schedule, "micro_batches": runs,
                                          "step_ms": step, "predicted_ms": round(predicted, 2),
                                          "measured_over_predicted": round(step / predicted, 3),
                                          "speedup_vs_single": round(single / step, 3),
                                          "bubble": round(sum(idle) / len(idle), 3), "bubble_per_stage": [round(x, 3) for x in idle],
                                          "bubble_theory": round((pp - 1) / (runs + pp - 1), 3),
                                          "bubble_predicted": round(planned["bubble"], 3),
                                          "in_flight_per_stage": flight, "in_flight_bound": bound,
                                          "peak_bytes_per_stage": [peaks[r] for r in stage_ranks],
                                          "predicted_peak_bytes_per_stage": [round(st["step_bytes"]) for st in planned["stages"]],
                                          "peak_bytes_max": max(peaks),
                                          "oversubscribed": dp * pp > os.cpu_count()}), flush=True)
                if link == "shm" and "pp2" in meshes:
                    search(build, model, corpus, m, searched)


def search(build, model, corpus, m, measured):
    """The planner's choice for 2 ranks against every 2-rank mesh measured (`measured`: pp2's step
    with 1f1b; dp2 and tp2 measured here)."""
    batch = model[5]
    for name, flags in (("dp2xtp1xpp1", ["--dp", "2", "--tp", "1"]), ("dp1xtp2xpp1", ["--dp", "1", "--tp", "2"])):
        log(f"{name}, {m} micro-batches")
        rows, _ = train(build, model, 2, ["--batch", str(batch // int(flags[1])), *flags, "--micro-batches", str(m),
                                           "--data", corpus])
        measured[name] = max(r["ms_per_step"] for r in rows)
    log(f"the planner's choice, {m} micro-batches")
    cmd = [os.path.join(build, "apps", "troupe-launch"), "-n", "2", "--timeout", "600", "--", os.path.join(build, "apps", "troupe-gpt"),
           *model_flags(model), "--steps", str(STEPS), "--eval-every", "0", "--val-batches", "1", "--threads", "1", "--amp", "O0",
           "--batch", str(batch), "--micro-batches", str(m), "--data", corpus]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    chose = re.search(r"planner chose dp=(\d+) x tp=(\d+)(?: x pp=(\d+))?", out)
    chosen = "dp%sxtp%sxpp%s" % (chose.group(1), chose.group(2), chose.group(3) or "1")
    step = max(json.loads(l[l.index("{"):])["ms_per_step"] for l in out.splitlines() if '"app":"troupe-gpt"' in l)
    fastest = min(measured, key=measured.get)
    print(json.dumps({"bench": "pipeline-search", **machine(), "link": "shm", "ranks": 2, "micro_batches": m,
                      "chosen": chosen, "chosen_step_ms": step, "measured_ms": measured, "fastest": fastest,
                      "chosen_over_fastest": round(step / measured[fastest], 3)}), flush=True)


if __name__ == "__main__":
    main()
