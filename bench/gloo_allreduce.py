#!/usr/bin/env python3
"""The torch.distributed (gloo) side of `bench/run allreduce`: all_reduce (sum) of f32 tensors,
median of REPS after a warm-up; rank 0 prints {"impl":"gloo","bytes":...,"ms":...} per size.
usage: gloo_allreduce.py WORLD PORT REPS MiB...   (starts the WORLD ranks itself)"""
import json, os, statistics, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, port, reps, sizes):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for mib in sizes:
        x = torch.ones(int(mib * 1024 * 1024 / 4))
        dist.all_reduce(x)
        ms = []
        for _ in range(reps):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(x)
            ms.append((time.perf_counter() - t) * 1e3)
        if rank == 0:
            print(json.dumps({"impl": "gloo", "bytes": x.numel() * 4, "ms": round(statistics.median(ms), 3)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world, port, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    sizes = [float(s) for s in sys.argv[4:]]
    mp.spawn(rank_main, args=(world, port, reps, sizes), nprocs=world)
