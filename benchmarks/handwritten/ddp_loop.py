"""Hand-written DDP training loop, as in PyTorch's DDP tutorial (and, for BERT, torch-ddp-examples).
torchrun --nproc_per_node N -m benchmarks.handwritten.ddp_loop [--task bert-sentiment --data-dir DIR]"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from benchmarks.handwritten.common import (
    Window,
    args,
    device,
    param_sample,
    pin,
    pinned,
    rank_spread,
    run_steps,
    train_step,
    workload,
)
from distbench import leave


def main():
    a = args()
    torch.set_num_threads(a.threads)
    dev = device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    cores = pin(a)
    rank, world = dist.get_rank(), dist.get_world_size()
    model, dataset, collate, loss, optimizer_class = workload(a)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    per_process = a.batch_size // world
    loader = DataLoader(
        dataset, per_process, sampler=sampler, collate_fn=collate, drop_last=True, pin_memory=pinned(dev)
    )
    gpu = [dev.index] if dev.type == "cuda" else None
    buckets = {} if a.bucket_cap_mb is None else {"bucket_cap_mb": a.bucket_cap_mb}
    model = DDP(model.to(dev), device_ids=gpu, **buckets)
    optimizer = optimizer_class(model.parameters(), lr=a.lr)
    window = Window(a.warmup, dist.barrier, dev)
    run_steps(loader, a.steps, train_step(model, optimizer, loss, dev=dev), window, sampler)
    mine = param_sample(model)
    rows = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(rows, mine)
    window.report(a, rank == 0, world, cores, rank_spread(torch.cat(rows)))
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    main()
    leave()  # gloo and torch._dynamo can abort a finishing process (distbench.leave)
