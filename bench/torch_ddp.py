#!/usr/bin/env python3
"""The PyTorch side of bench/run dp's scaling row: gpt-mini training steps (bench/torch_workloads.py's
model) with DistributedDataParallel over gloo, WORLD local processes of 1 thread each (1 = no DDP);
prints {"impl":"torch-ddp","world":...,"ms":median}.
usage: torch_ddp.py WORLD PORT [STEPS]"""
import json, os, statistics, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_workloads import GPT  # noqa: E402


def rank_main(rank, world, port, steps, out):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = GPT()
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    x, y = torch.randint(0, 256, (8, 128)), torch.randint(0, 256, (8, 128))
    ms = []
    for i in range(steps + 2):
        t = time.perf_counter()
        loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= 2:
            ms.append((time.perf_counter() - t) * 1e3)
    out[rank] = statistics.median(ms)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    world, port = int(sys.argv[1]), int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    manager = mp.Manager()
    out = manager.dict()
    if world == 1:
        rank_main(0, 1, port, steps, out)
    else:
        mp.spawn(rank_main, args=(world, port, steps, out), nprocs=world)
    print(json.dumps({"impl": "torch-ddp", "world": world, "ms": round(max(out.values()), 3)}))
