"""One process of `run.py commbench`: each library's own all-reduce, timed over message sizes.

    torchrun --nproc_per_node 2 -m distbench.scaling.worker --backend ddp --sizes 4096,65536 --repeats 20 --output F

Started by the backend's own launcher, it sets the backend up as a run does (distbench's process group set-up) and
times `Backend.gradient_all_reduce`: the call the library uses for gradients. Each repeat is timed between
barriers on every rank; a repeat's time is the slowest rank's, and beside it the CPU time the all-reduce cost the
busiest rank (what it takes from a CPU node's computation). The main process writes one JSON object to --output:
the world size and, per size, the time and CPU time of every repeat.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from distbench import leave
from distbench.backends import get_spec
from distbench.backends.base import ReduceOp
from distbench.launching import launch

WARMUP = 3  # untimed all-reduces per size: connections set up, buffers allocated


def time_all_reduce(backend, size: int, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds of each repeat of a float32 all-reduce of `size` bytes, the slowest rank's, and the CPU seconds it
    cost the busiest rank (every thread of the process: the library's own, the kernel's work on its behalf)."""
    t = torch.ones(max(1, size // 4), dtype=torch.float32, device=backend.device)
    for _ in range(WARMUP):
        backend.gradient_all_reduce(t)
    times, cpu = [], []
    for _ in range(repeats):
        backend.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        backend.gradient_all_reduce(t)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    both = torch.tensor([times, cpu], dtype=torch.float64)
    slowest = backend.all_reduce(both, ReduceOp.MAX).tolist()
    return slowest[0], slowest[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes")
    p.add_argument("--repeats", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--output", required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    env = launch.current()
    spec = get_spec(a.backend)
    spec.check_launch(env)
    backend = spec.load()(env)
    backend.setup()
    sizes = [int(s) for s in a.sizes.split(",")]
    results = {str(size): time_all_reduce(backend, size, a.repeats) for size in sizes}
    if backend.is_main:
        record = {
            "backend": a.backend,
            "world_size": backend.world_size,
            "launcher": env.launcher,
            "nodes": env.nodes,
            "times_s": {size: wall for size, (wall, _) in results.items()},
            "cpu_s": {size: cpu for size, (_, cpu) in results.items()},
        }
        with open(a.output, "w", encoding="utf-8") as f:
            json.dump(record, f)
    backend.barrier()
    backend.teardown()


if __name__ == "__main__":
    main()
    leave()  # gloo and torch._dynamo can abort a finishing process (distbench.leave)
