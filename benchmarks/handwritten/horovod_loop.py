"""Hand-written Horovod training loop, as in Horovod's pytorch_mnist.py example.
horovodrun -np N python -m benchmarks.handwritten.horovod_loop [--task bert-sentiment --data-dir DIR]"""

import horovod.torch as hvd
import torch
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
    hvd.init()
    dev = device(hvd.local_rank())
    torch.set_num_threads(a.threads)
    cores = pin(a)
    model, dataset, collate, loss, optimizer_class = workload(a)
    sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank(), seed=0, drop_last=True)
    per_process = a.batch_size // hvd.size()
    loader = DataLoader(
        dataset, per_process, sampler=sampler, collate_fn=collate, drop_last=True, pin_memory=pinned(dev)
    )
    model = model.to(dev)
    optimizer = optimizer_class(model.parameters(), lr=a.lr)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    window = Window(a.warmup, hvd.barrier, dev)
    run_steps(loader, a.steps, train_step(model, optimizer, loss, dev=dev), window, sampler)
    spread = rank_spread(hvd.allgather(param_sample(model)))
    window.report(a, hvd.rank() == 0, hvd.size(), cores, spread)
    hvd.shutdown()


if __name__ == "__main__":
    main()
    leave()  # gloo and torch._dynamo can abort a finishing process (distbench.leave)
