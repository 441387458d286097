#!/usr/bin/env python3
"""The custom-ReLU experiment: steps sr-lite needs to reach a fixed held-out PSNR with relu and
with custom-relu (relu forward, leaky gradient), over several seeds on the same data. Prints one
JSON line per run and one per activation. Steps-to-target do not depend on machine load; timings
of the two activations are measured by `bench/run vs-torch` instead.

usage: bench/custom_relu_experiment.py BUILD_DIR [--target 23.0] [--steps 700] [--seeds 1 2 3]
"""
import argparse, csv, json, os, statistics, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor


def run(build, act, seed, args, workdir):
    metrics = os.path.join(workdir, f"{act}-{seed}.csv")
    cmd = [os.path.join(build, "apps", "troupe-sr"), "--act", act, "--seed", str(seed), "--steps", str(args.steps),
           "--eval-every", str(args.eval_every), "--threads", "1", "--metrics", metrics, "--log-every", "1000",
           "--amp", "O0"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    reached, best = None, 0.0
    with open(metrics) as f:
        for row in csv.DictReader(f):
            if row["val_psnr"]:
                psnr = float(row["val_psnr"])
                best = max(best, psnr)
                if reached is None and psnr >= args.target:
                    reached = int(row["step"])
    return {"bench": "custom-relu-experiment", "act": act, "seed": seed, "target_psnr": args.target,
            "steps_to_target": reached, "best_psnr": round(best, 3), "max_steps": args.steps}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--target", type=float, default=23.0)
    p.add_argument("--steps", type=int, default=700)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as workdir, ThreadPoolExecutor(args.jobs) as pool:
        jobs = [(act, seed) for seed in args.seeds for act in ("relu", "custom-relu")]
        results = list(pool.map(lambda j: run(args.build, j[0], j[1], args, workdir), jobs))
    for r in results:
        print(json.dumps(r), flush=True)
    for act in ("relu", "custom-relu"):
        steps = [r["steps_to_target"] for r in results if r["act"] == act]
        done = [s for s in steps if s is not None]
        print(json.dumps({"bench": "custom-relu-summary", "act": act, "target_psnr": args.target,
                          "runs": len(steps), "reached": len(done),
                          "mean_steps": statistics.mean(done) if done else None,
                          "steps": steps}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
