"""The start-up floor of a launcher: the least any program started by it does before its first exchange.

    torchrun --nproc_per_node 2 benchmarks/handwritten/startup_floor.py --library ddp [--step]

`--library` says which library's idiom: `torch` (one process, no group), `ddp` (torch.distributed + gloo),
`accelerate` (Accelerator) or `horovod` (hvd.init). Without `--step` (the *join* floor): import torch and the
library, join the process group, all-reduce one tensor. With `--step` (the *first-step* floor): the same, then
wrap a one-layer model and its SGD optimizer the library's way and take one training step, which exchanges the
gradients. The main process prints one JSON line: when it finished (unix time) and how long its imports took.

Nothing here is distbench's: this is the baseline distbench's own start-up is measured against
(benchmarks/startup.py).
"""

import argparse
import json
import os
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--library", choices=["torch", "ddp", "accelerate", "horovod"], required=True)
    p.add_argument("--step", action="store_true", help="also one training step through the library's wrapper")
    a = p.parse_args()
    started = time.time()
    rank, leave = {"torch": single, "ddp": ddp, "accelerate": accelerate, "horovod": horovod}[a.library](a.step)
    done = time.time()
    leave()
    if rank == 0:
        print(json.dumps({"done_unix": done, "main_started_unix": started}), flush=True)
    # Leave without interpreter finalization, as run.py does: with torch._dynamo imported (by the optimizer), a gloo
    # worker thread can abort the process while the interpreter finalizes (pytorch/pytorch#179291).
    sys.stderr.flush()
    os._exit(0)


def _model_and_optimizer():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _step(model, optimizer, backward) -> None:
    import torch

    optimizer.zero_grad()
    loss = model(torch.ones(4, 16)).sum()
    backward(loss)
    optimizer.step()


# Each library's form: join, exchange (or step); returns this process's rank and how it leaves the group.


def single(step: bool):
    import torch

    if step:
        model, optimizer = _model_and_optimizer()
        _step(model, optimizer, lambda loss: loss.backward())
    else:
        torch.ones(1).add_(1)
    return 0, lambda: None


def ddp(step: bool):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if step:
        model, optimizer = _model_and_optimizer()
        model = torch.nn.parallel.DistributedDataParallel(model)
        _step(model, optimizer, lambda loss: loss.backward())  # DDP: backward all-reduces the gradients
    else:
        dist.all_reduce(torch.ones(1))
    return dist.get_rank(), dist.destroy_process_group


def accelerate(step: bool):
    import torch
    from accelerate import Accelerator

    acc = Accelerator(cpu=not torch.cuda.is_available())
    if step:
        model, optimizer = acc.prepare(*_model_and_optimizer())
        _step(model, optimizer, acc.backward)
    else:
        acc.reduce(torch.ones(1))
    return acc.process_index, acc.end_training


def horovod(step: bool):
    import horovod.torch as hvd
    import torch

    hvd.init()
    if step:
        model, optimizer = _model_and_optimizer()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        _step(model, optimizer, lambda loss: loss.backward())  # Horovod: step() waits for the all-reduces
    else:
        hvd.allreduce(torch.ones(1))
    return hvd.rank(), hvd.shutdown


if __name__ == "__main__":
    main()
