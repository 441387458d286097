#!/usr/bin/env python3
"""bench/run allreduce: AllReduce of 1-256 MiB f32 buffers across 2 local processes, Troupe over
UCX next to OpenMPI's MPI_Allreduce and torch.distributed's gloo, each size measured by the three
in turn in one invocation, with a memcpy of the same size as the physical reference. busbw follows
nccl-tests: algbw * 2 (n - 1) / n, with algbw = bytes / time. Prints one JSON line per size."""
import json, os, socket, subprocess, sys

WORLD, REPS = 2, 5
SIZES_MIB = [1, 4, 16, 64, 256]
TORCH_PYTHON = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lines(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(l[l.index("{"):]) for l in out.splitlines() if "{" in l and '"impl"' in l]


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    here = os.path.dirname(os.path.abspath(__file__))
    mpi_exe = os.path.join(build, "bench", "mpi-allreduce")
    subprocess.run(["mpicc", "-O2", "-o", mpi_exe, os.path.join(here, "mpi_allreduce.c")], check=True)
    for mib in SIZES_MIB:
        size = str(mib)
        troupe = lines([os.path.join(build, "apps", "troupe-launch"), "-n", str(WORLD), "--",
                        os.path.join(build, "bench", "troupe-bench-allreduce"), str(REPS), size])[0]
        mpi = lines(["mpirun", "-n", str(WORLD), "--oversubscribe", "--allow-run-as-root", mpi_exe, str(REPS), size])[0]
        gloo = lines([TORCH_PYTHON, os.path.join(here, "gloo_allreduce.py"), str(WORLD), str(free_port()), str(REPS), size])[0]
        factor = 2 * (WORLD - 1) / WORLD
        busbw = lambda r: round(r["bytes"] / (r["ms"] / 1e3) / 1e9 * factor, 3)
        print(json.dumps({"bench": "allreduce", "bytes": troupe["bytes"], "ranks": WORLD, "ms_troupe": troupe["ms"],
                          "ms_mpi": mpi["ms"], "ms_gloo": gloo["ms"], "busbw_troupe": busbw(troupe),
                          "busbw_mpi": busbw(mpi), "busbw_gloo": busbw(gloo), "memcpy_gbps": troupe["memcpy_gbps"]}),
              flush=True)


if __name__ == "__main__":
    main()
