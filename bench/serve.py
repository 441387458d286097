#!/usr/bin/env python3
"""bench/run serve: troupe-serve under load, next to a plain PyTorch http.server handler
(bench/torch_serve.py) serving the same model shapes, one JSON line per measurement on stdout:
  {"bench":"serve","route":"upscale"|"generate","server":"troupe-batched"|"troupe-batch1"|"troupe-direct"|"torch-http.server",
   "concurrency":C,"requests":N,"throughput_rps":..,"p50_ms":..,"p99_ms":..,"failed":..,"status_503":..}
troupe-direct is the batching server with --actor-threads 0 (the workers call the traced models
themselves instead of running actor programs), to show what the actor runtime costs. Then one
"serve-summary" line per route with the issue's ratios at concurrency 16, and two
"serve-soak" lines: 10 000 requests of each route at 16 clients (a 32x32 PNG; 4 tokens at
temperature 0.8) against the batching server, counting the failed ones. The load
generator is troupe-bench-serve-load (bench/serve_load.cpp): C keep-alive clients on loopback.
Models: sr-lite and gpt-mini as troupe-sr and troupe-gpt save them after one step (the weights do
not change the cost); upscale sends a 128x128 PNG, generate asks 32 tokens greedily. Each server
answers a few unrecorded requests of both routes first."""
import json, os, socket, struct, subprocess, sys, tempfile, time, zlib

from jit import TORCH_PYTHON, log, machine

HERE = os.path.dirname(os.path.abspath(__file__))
CONCURRENCY = (1, 4, 16)
REQUESTS = {"upscale": 64, "generate": 32}
THREADS = min(2, os.cpu_count() or 1)


def png(width, height):
    raw = b"".join(b"\x00" + bytes(((x * 7 + y * 13) % 256) for x in range(width * 3)) for y in range(height))
    chunk = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, env=None):
    """Starts a server; returns (process, port) once it prints its first line."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()
    if "127.0.0.1:" in line:
        return p, int(line.split("127.0.0.1:")[1].split()[0])
    return p, None


def measure(build, port, route, body, concurrency, requests=None):
    cmd = [os.path.join(build, "bench", "troupe-bench-serve-load"), str(port), "/v1/" + route, body, str(concurrency),
           str(requests or REQUESTS[route])]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def warm_up(build, port, bodies):
    """Every server first answers a few requests of each route, unrecorded: traces, plans and
    PyTorch's per-shape kernels are built before anything is timed."""
    for route, body in bodies.items():
        measure(build, port, route, body, 4, 8)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    work = tempfile.mkdtemp(prefix="troupe-serve-bench-")
    env = dict(os.environ)
    log("saving sr-lite and gpt-mini after one step")
    for app, extra in (("troupe-sr", []), ("troupe-gpt", [])):
        subprocess.run([os.path.join(build, "apps", app), "--steps", "1", "--eval-every", "0", "--amp", "O0", "--save",
                        os.path.join(work, app)] + extra, check=True, capture_output=True, env=env)
    bodies = {"upscale": os.path.join(work, "in.png"), "generate": os.path.join(work, "prompt.json")}
    with open(bodies["upscale"], "wb") as f:
        f.write(png(128, 128))
    with open(bodies["generate"], "w") as f:
        json.dump({"prompt": "The actor model ", "max_tokens": 32, "temperature": 0}, f)
    servers = {
        "troupe-batched": ["--max-batch", "16", "--max-wait-ms", "5"],
        "troupe-batch1": ["--max-batch", "1", "--max-wait-ms", "0"],
        # The batching server without actor programs: what running through the actor runtime costs.
        "troupe-direct": ["--max-batch", "16", "--max-wait-ms", "5", "--actor-threads", "0"],
    }
    soak_bodies = {"upscale": os.path.join(work, "small.png"), "generate": os.path.join(work, "short.json")}
    with open(soak_bodies["upscale"], "wb") as f:
        f.write(png(32, 32))
    with open(soak_bodies["generate"], "w") as f:
        json.dump({"prompt": "The actor ", "max_tokens": 4, "temperature": 0.8}, f)
    results, soak = {}, {}
    for name, flags in servers.items():
        log(f"{name}")
        p, port = start([os.path.join(build, "apps", "troupe-serve"), "--port", "0", "--sr", os.path.join(work, "troupe-sr"),
                         "--gpt", os.path.join(work, "troupe-gpt"), "--queue", "1024", "--threads", str(THREADS)] + flags, env)
        try:
            warm_up(build, port, bodies)
            for route in ("upscale", "generate"):
                for c in CONCURRENCY:
                    results[(route, name, c)] = measure(build, port, route, bodies[route], c)
            if name == "troupe-batched":
                log("soak: 10 000 requests of each route")
                for route in ("upscale", "generate"):
                    soak[route] = measure(build, port, route, soak_bodies[route], 16, 10000)
        finally:
            p.terminate()
            p.wait()
    log("torch-http.server")
    port = free_port()
    p = subprocess.Popen([TORCH_PYTHON, os.path.join(HERE, "torch_serve.py"), str(port), str(THREADS)],
                         stdout=subprocess.PIPE, text=True, cwd=HERE)
    p.stdout.readline()
    try:
        warm_up(build, port, bodies)
        for route in ("upscale", "generate"):
            for c in CONCURRENCY:
                results[(route, "torch-http.server", c)] = measure(build, port, route, bodies[route], c)
    finally:
        p.terminate()
        p.wait()
    m = machine()
    for (route, server, c), r in results.items():
        print(json.dumps({"bench": "serve", "route": route, "server": server, **r, "threads": THREADS, "isa": m["isa"],
                          "cpu": m["cpu"]}), flush=True)
    for route in ("upscale", "generate"):
        b, one, direct, torch = (results[(route, s, 16)]
                                 for s in ("troupe-batched", "troupe-batch1", "troupe-direct", "torch-http.server"))
        print(json.dumps({"bench": "serve-summary", "route": route, "concurrency": 16,
                          "batching_speedup": round(b["throughput_rps"] / one["throughput_rps"], 3),
                          "vs_torch": round(b["throughput_rps"] / torch["throughput_rps"], 3),
                          "actors_vs_direct": round(b["throughput_rps"] / direct["throughput_rps"], 3),
                          "p99_over_p50": round(b["p99_ms"] / b["p50_ms"], 3),
                          "failed": sum(r["failed"] for k, r in results.items() if k[1] != "torch-http.server")}), flush=True)
    for route, r in soak.items():
        print(json.dumps({"bench": "serve-soak", "route": route, "server": "troupe-batched", **r}), flush=True)


if __name__ == "__main__":
    main()
