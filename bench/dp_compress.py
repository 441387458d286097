#!/usr/bin/env python3
"""bench/run dp compress: gradient compression on slow links. DP = 2 gpt-mini (per-rank batch 8,
1 scheduler thread per rank, f32) on the two network-namespace hosts of bench/netns.sh at 1 Gbit/s
and at 100 Mbit/s, for --grad-compression none / bf16 / powersgd:1,2,4,16,32 / auto: the step time (median
of the steps after PowerSGD's 10 whole ones and auto's choice), the bytes rank 0 sent per step
then, and the validation loss after STEPS steps next to the uncompressed run's. The uncompressed
run goes first and again last, so drift on the link shows. Then convergence, which does not depend
on the link: the same settings over shared memory for CONVERGENCE_STEPS steps, the validation loss
on 16 held-out batches. One JSON line per measurement.
usage: dp_compress.py BUILD [STEPS [CONVERGENCE_STEPS [SPECS]]]   (the link rows need root: ip netns,
tc; STEPS 0 skips them, CONVERGENCE_STEPS 0 the convergence; SPECS, comma-separated, the settings,
"none" first)"""
import csv, json, os, statistics, subprocess, sys, tempfile

from jit import machine  # the CPU and its instruction set, as every benchmark line names them
from netns import HOST_A, HOST_B, on_hosts

SPECS = ["none", "bf16", "powersgd:1", "powersgd:2", "powersgd:4", "powersgd:16", "powersgd:32", "auto"]
LINKS = [(1000, "1gbit"), (100, "100mbit")]
MEASURED_FROM = 13  # steps 1-10 go whole under PowerSGD; auto chooses at step 7


def run(build, spec, steps, folder, netns=True, val_batches=8):
    metrics = os.path.join(folder, spec.replace(":", "") + ".csv")
    cmd = [os.path.join(build, "apps", "troupe-gpt"), "--dp", "2", "--steps", str(steps), "--eval-every", "100000",
           "--val-batches", str(val_batches), "--threads", "1", "--micro-batches", "1", "--amp", "O0",
           "--grad-compression", spec, "--metrics", metrics]
    if netns:
        out = on_hosts(cmd, [HOST_A, HOST_B], 29640, {})
    else:
        out = subprocess.run([os.path.join(build, "apps", "troupe-launch"), "-n", "2", "--", *cmd], check=True,
                             capture_output=True, text=True).stdout
    final = [json.loads(l[l.index("{"):]) for l in out.splitlines() if '"app":"troupe-gpt"' in l]
    if len(final) != 2:
        raise RuntimeError(f"--grad-compression {spec}: the ranks did not finish:\n{out}")
    with open(metrics) as f:
        rows = [r for r in csv.DictReader(f) if int(r["step"]) >= MEASURED_FROM]
    choice = next((l.split("gradient compression ", 1)[1] for l in out.splitlines() if "gradient compression auto (" in l), None)
    return {"step_ms": statistics.median(float(r["step_ms"]) for r in rows),
            "exposed_comm_ms": statistics.median(float(r["exposed_comm_ms"]) for r in rows),
            "bytes_per_step": statistics.median(int(r["comm_bytes"]) for r in rows),
            "val_loss": final[0]["val_loss"], "choice": choice}


def convergence(build, steps, specs, m):
    with tempfile.TemporaryDirectory() as folder:
        results = {spec: run(build, spec, steps, folder, netns=False, val_batches=16) for spec in specs}
    none = results["none"]["val_loss"]
    for spec, r in results.items():
        line = {"bench": "dp-compress-convergence", "link": "shm", "compression": spec, "steps": steps,
                "val_loss": round(r["val_loss"], 4), "val_loss_none": round(none, 4),
                "val_loss_vs_none": round(r["val_loss"] / none, 4), "cpu": m["cpu"], "isa": m["isa"]}
        if r["choice"]:
            line["auto_choice"] = r["choice"]
        print(json.dumps(line), flush=True)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    convergence_steps = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    specs = sys.argv[4].split(",") if len(sys.argv) > 4 else SPECS
    here = os.path.dirname(os.path.abspath(__file__))
    m = machine()
    for mbit, rate in LINKS if steps > 0 else []:
        if subprocess.run([os.path.join(here, "netns.sh"), "up", rate], capture_output=True).returncode != 0:
            print(json.dumps({"bench": "dp-compress", "link_mbit": mbit, "skipped": "needs root for ip netns and tc"}))
            break
        try:
            with tempfile.TemporaryDirectory() as folder:
                none = run(build, "none", steps, folder)
                results = {spec: run(build, spec, steps, folder) for spec in specs[1:]}
                none_again = run(build, "none", steps, folder)
                base = statistics.mean([none["step_ms"], none_again["step_ms"]])
                for spec, r in [("none", none), *results.items(), ("none", none_again)]:
                    line = {"bench": "dp-compress", "link_mbit": mbit, "compression": spec, "steps": steps,
                            "step_ms": round(r["step_ms"], 1), "exposed_comm_ms": round(r["exposed_comm_ms"], 1),
                            "bytes_per_step": r["bytes_per_step"], "speedup_vs_none": round(base / r["step_ms"], 3),
                            "bytes_ratio_vs_none": round(none["bytes_per_step"] / max(1, r["bytes_per_step"]), 2),
                            "val_loss": round(r["val_loss"], 4), "val_loss_none": round(none["val_loss"], 4),
                            "cpu": m["cpu"], "isa": m["isa"]}
                    if r["choice"]:
                        line["auto_choice"] = r["choice"]
                    print(json.dumps(line), flush=True)
        finally:
            subprocess.run([os.path.join(here, "netns.sh"), "down"])
    if convergence_steps > 0:
        convergence(build, convergence_steps, specs, m)


if __name__ == "__main__":
    main()
