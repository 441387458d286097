#!/usr/bin/env python3
"""bench/run llama-prediction: the cost model's prediction (a model, not a measurement) for a
LLaMA-7B-shaped GPT on 8 V100-class GPUs, dp8 against dp4 x tp2, next to the source article's
reported 32 -> 46 samples/s and 48 -> 24 GB per device. The shape: d_model 4096, 32 layers, 32
heads, a GELU MLP of d_ff 16384 (the parameters of LLaMA's SwiGLU of 11008), sequences of 512
tokens, a global batch of 32; troupe-gpt's byte vocabulary (LLaMA's 32000-token embeddings, 0.26B
parameters, are left out); f32 values, AdamW. The figures assumed per device: 50 TFLOP/s at the
products (40% of a V100's 125 TFLOP/s fp16 peak), 900 GB/s for the optimizer's update (HBM2), and
100 GB/s with 10 us per collective on both mesh axes (NVLink within one node). troupe-gpt
--plan-only plans 1 and 2 layers (a 7B model's weights do not fit this machine) and every figure
is extrapolated linearly to 32 layers (each layer adds the same work, bytes and memory). One JSON
line per mesh, and one comparing them. Then the meshes with pipeline stages (plan/pipeline_cost.hpp,
1F1B, each replica's rows one sample a micro-batch): each stage planned with 1 and 2 layers, its
micro-batch, update, all-reduce and memory extrapolated to its 32 / pp layers, the step made of
them as the model makes it; one JSON line each."""
import json, os, subprocess, sys

from jit import machine

LAYERS, GLOBAL_BATCH = 32, 32
MODEL = ["--d-model", "4096", "--heads", "32", "--d-ff", "16384", "--seq", "512"]
FIGURES = ["--gflops", "50000", "--update-gbps", "900", "--link-gbps", "100", "--link-latency-us", "10", "--devices", "8"]
MESHES = [("dp8", 8, 1), ("dp4xtp2", 4, 2)]
PIPELINES = [("dp4xpp2", 4, 1, 2), ("dp2xtp2xpp2", 2, 2, 2), ("dp2xpp4", 2, 1, 4), ("tp2xpp4", 1, 2, 4)]


def plan(build, layers, dp, tp):
    cmd = [os.path.join(build, "apps", "troupe-gpt"), *MODEL, "--layers", str(layers), "--plan-only", "--dp", str(dp),
           "--tp", str(tp), "--batch", str(GLOBAL_BATCH // dp), *FIGURES]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])


def extrapolate(one, two, key, layers=LAYERS):
    return one[key] + (layers - 1) * (two[key] - one[key])


def plan_pipeline(build, per_stage, dp, tp, pp):
    m = GLOBAL_BATCH // dp
    cmd = [os.path.join(build, "apps", "troupe-gpt"), *MODEL, "--layers", str(per_stage * pp), "--plan-only", "--dp", str(dp),
           "--tp", str(tp), "--pp", str(pp), "--pp-layers", ",".join([str(per_stage)] * pp), "--batch", str(m),
           "--micro-batches", str(m), *FIGURES]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])


def pipeline_row(build, name, dp, tp, pp):
    """A pipelined mesh's prediction: each stage's figures at 32 / pp layers, combined as
    plan::pipeline_cost does (m + p - 1 micro-batch slots of the slowest stage, then its update)."""
    one, two = plan_pipeline(build, 1, dp, tp, pp), plan_pipeline(build, 2, dp, tp, pp)
    per_stage, m = LAYERS // pp, GLOBAL_BATCH // dp
    stages = [{k: extrapolate(a, b, k, per_stage) for k in ("micro_batch_ms", "transfer_ms", "optimizer_ms", "gradient_sync_ms",
                                                            "peak_bytes")} for a, b in zip(one["stages"], two["stages"])]
    slowest = max(s["micro_batch_ms"] + s["transfer_ms"] for s in stages)
    ms = (m + pp - 1) * slowest + max(s["optimizer_ms"] + s["gradient_sync_ms"] for s in stages)
    return {"bench": "llama-prediction", "mesh": name, "kind": "cost model, not a measurement", "schedule": "1f1b",
            "micro_batches": m, "predicted_step_ms": round(ms, 1), "samples_per_s": round(GLOBAL_BATCH / (ms / 1e3), 2),
            "bubble": round(1 - m * min(s["micro_batch_ms"] for s in stages) / ((m + pp - 1) * slowest), 3),
            "gib_per_device": round(max(s["peak_bytes"] for s in stages) / 2**30, 2), **machine()}


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    rows = {}
    for name, dp, tp in MESHES:
        one, two = plan(build, 1, dp, tp), plan(build, 2, dp, tp)
        ms = extrapolate(one, two, "predicted_ms")
        memory = {k: extrapolate(one["memory_per_rank"], two["memory_per_rank"], k) / 2**30 for k in one["memory_per_rank"]}
        rows[name] = {"bench": "llama-prediction", "mesh": name, "kind": "cost model, not a measurement",
                      "predicted_step_ms": round(ms, 1),
                      "compute_ms": round(extrapolate(one, two, "predicted_compute_ms"), 1),
                      "communication_ms": round(extrapolate(one, two, "predicted_communication_ms"), 1),
                      "optimizer_ms": round(extrapolate(one, two, "predicted_optimizer_ms"), 1),
                      "samples_per_s": round(GLOBAL_BATCH / (ms / 1e3), 2),
                      "gib_per_device": {k: round(v, 2) for k, v in memory.items()}, **machine()}
        print(json.dumps(rows[name]), flush=True)
    a, b = rows["dp8"], rows["dp4xtp2"]
    print(json.dumps({"bench": "llama-prediction-vs-article", "kind": "cost model, not a measurement",
                      "predicted_samples_per_s": [a["samples_per_s"], b["samples_per_s"]],
                      "predicted_speedup": round(b["samples_per_s"] / a["samples_per_s"], 3),
                      "predicted_gib_per_device": [a["gib_per_device"]["total"], b["gib_per_device"]["total"]],
                      "article_samples_per_s": [32, 46], "article_speedup": round(46 / 32, 3),
                      "article_gb_per_device": [48, 24]}), flush=True)
    for name, dp, tp, pp in PIPELINES:
        print(json.dumps(pipeline_row(build, name, dp, tp, pp)), flush=True)


if __name__ == "__main__":
    main()
