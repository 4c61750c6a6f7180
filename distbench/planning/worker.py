"""One process of `run.py commbench`: each library's own all-reduce, timed over message sizes (and where the library
all-gathers its parameters after each step, DeepSpeed's ZeRO-1 and 2, that all-gather too).

    torchrun --nproc_per_node 2 -m distbench.planning.worker --backend ddp --sizes 4096,65536 --repeats 20 --output F

Started by the backend's own launcher, it sets the backend up as a run does (distbench's process group set-up) and
times `Backend.gradient_all_reduce`: the call the library uses for gradients, with its 16-bit compression where
--grad-compression asks (a message of S bytes is then a float32 gradient of S bytes, sent in 16 bits). Each repeat is
timed between barriers on every rank; a repeat's time is the slowest rank's, and beside it the CPU time the all-reduce
cost the busiest rank.

On CPU ranks each repeat is timed a second time under load (`Load`): a thread computes on the rank's core all the
while, as backward does in training, and the computation the all-reduce took from it is measured (the busiest rank's):
what an exchange costs a CPU node's training, where its CPU time without that load is not (a library may poll, and then
yields to the computation; the kernel's network work and the library's threads take from it in turn).

Under --dilation K (commbench's, as an emulated run's: docs/emulation.md) the link is shaped K times slower and
every time is divided back by K, the time as measured kept beside it (`dilated_time_s`); nothing is timed under load
(the cluster a dilation emulates computes on devices, not on the cores its exchanges run on).

The main process writes one JSON object to --output: the world size and, per size, each repeat's time and CPU time
and, on CPU ranks, its time under load and the computation it took.
"""

from __future__ import annotations

import argparse
import bisect
import threading
import time
from pathlib import Path

import torch

from distbench import leave, process
from distbench.backends import get_spec
from distbench.backends.base import SIXTEEN_BIT, ReduceOp
from distbench.config import GradCompression
from distbench.launching import link
from distbench.launching.commands import check_launch
from distbench.records import write_json

WARMUP = 3  # untimed all-reduces per size: connections set up, buffers allocated
MIN_BASELINE_S = 2e-3  # the shortest window the load's pace is measured over


class Load:
    """A computing thread on the rank's core: a small matrix product over and over (it releases the GIL, as
    backward's kernels do), each one's end kept, so that the computation done in any window is known. It computes
    only between `resume` and `pause`: the all-reduces without it are timed while it waits (what else the machine
    runs, commbench does not control: it records the load average around each launch)."""

    SIDE = 160  # some tens of microseconds a product at one thread (96 x 96: 15 us here): a fine enough clock

    def __init__(self) -> None:
        self.ends = [time.perf_counter()]
        self._go, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._compute, daemon=True)
        self._thread.start()

    def _compute(self) -> None:
        a, b = torch.randn(self.SIDE, self.SIDE), torch.randn(self.SIDE, self.SIDE)
        c = torch.empty(self.SIDE, self.SIDE)
        while self._go.wait() and not self._stop.is_set():
            torch.mm(a, b, out=c)
            self.ends.append(time.perf_counter())

    def resume(self) -> None:
        """Compute again, from the end of a product (so that no pause lies inside a measured window)."""
        now = time.perf_counter()
        self._go.set()
        self.settle(now)

    def pause(self) -> None:
        """Stop computing after the product under way."""
        self._go.clear()

    def work(self, t: float) -> float:
        """Products done by time t, the one under way counted in proportion (call once one has ended after t)."""
        ends = self.ends
        i = bisect.bisect_right(ends, t)
        return i - 1 + (t - ends[i - 1]) / (ends[i] - ends[i - 1])

    def settle(self, t: float) -> None:
        """Wait until a product has ended after time t (`work` needs one on each side of it)."""
        while self.ends[-1] <= t:
            time.sleep(1e-4)

    def stop(self) -> None:
        """End the thread."""
        self._stop.set()
        self._go.set()
        self._thread.join()


def taken(load: Load, window: tuple[float, float], baseline: tuple[float, float]) -> float:
    """The computation `window` lost: its length less the work done in it at the pace of `baseline`, when the load
    computed alone."""
    load.settle(max(window[1], baseline[1]))
    pace = (load.work(baseline[1]) - load.work(baseline[0])) / (baseline[1] - baseline[0])
    return (window[1] - window[0]) - (load.work(window[1]) - load.work(window[0])) / pace


def exchange(backend, compression: str):
    """The library's all-reduce of a float32 gradient, as it sends it: as is, or cast to 16 bits and back."""
    if compression == "none":
        return backend.gradient_all_reduce
    dtype = SIXTEEN_BIT[compression]

    def compressed(t: torch.Tensor) -> None:
        # DDP's fp16_compress_hook (Accelerate's comm hook of that name), Horovod's Compression.fp16: cast the
        # gradient, all-reduce the cast, copy it back into the float32 gradient
        wire = t.to(dtype)
        backend.gradient_all_reduce(wire)
        t.copy_(wire)

    return compressed


def under_load(backend, all_reduce, t: torch.Tensor, load: Load, idle_s: float) -> tuple[float, float]:
    """One all-reduce while the load computes, after a baseline as long as it took idle: its seconds and the
    computation it took."""
    load.resume()
    backend.barrier()
    b0 = time.perf_counter()
    time.sleep(max(MIN_BASELINE_S, idle_s))
    b1 = time.perf_counter()
    backend.barrier()
    w0 = time.perf_counter()
    all_reduce(t)
    w1 = time.perf_counter()
    lost = taken(load, (w0, w1), (b0, b1))
    load.pause()
    return w1 - w0, lost


def _flat_and_part(backend, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A flat float32 buffer of about `size` bytes (a multiple of the world size in elements), and this rank's 1/W
    partition of it, apart (as a sharding library holds them), both ones."""
    world = backend.world_size
    flat = torch.ones(max(world, size // 4 // world * world), dtype=torch.float32, device=backend.device)
    return flat, flat.chunk(world)[backend.rank].clone()


def all_gather(backend, size: int):
    """The library's all-gather of updated parameters into a flat buffer of `size` bytes (float32), each rank sending
    its 1/W partition, as the library calls it (DeepSpeed's all_gather_dp_groups after a ZeRO-1/2 step)."""
    flat, part = _flat_and_part(backend, size)
    return lambda _t: backend.parameter_all_gather(flat, part)


def reduce_scatter(backend, size: int):
    """The library's reduce-scatter of a flat buffer of `size` bytes of gradients (float32), each rank keeping its 1/W
    partition, as the library calls it (DeepSpeed's reduce_scatter_tensor at the end of a ZeRO-3 backward)."""
    flat, part = _flat_and_part(backend, size)
    return lambda _t: backend.gradient_reduce_scatter(flat, part)


def collective_call(backend, collective: str, size: int, compression: str):
    """What is timed for `collective` at `size` bytes: the call, and the tensor it is given."""
    t = torch.ones(max(1, size // 4), dtype=torch.float32, device=backend.device)
    if collective == "all-gather":
        return all_gather(backend, size), t
    if collective == "reduce-scatter":
        return reduce_scatter(backend, size), t
    return exchange(backend, compression), t


def time_collective(
    backend, size: int, repeats: int, compression: str, load: Load | None, collective: str = "all-reduce"
) -> dict[str, list[float]]:
    """Per repeat: the slowest rank's seconds and the busiest rank's CPU seconds (every thread of the process: the
    library's own, the kernel's work on its behalf); under `load`, the slowest rank's seconds and the computation the
    busiest rank lost. The library's gradient all-reduce, or its parameters' all-gather (`collective`)."""
    all_reduce, t = collective_call(backend, collective, size, compression)
    for _ in range(WARMUP):
        all_reduce(t)
    out: dict[str, list[float]] = {"time_s": [], "cpu_s": [], "loaded_time_s": [], "loaded_cpu_s": []}
    for _ in range(repeats):
        backend.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        all_reduce(t)
        out["time_s"].append(time.perf_counter() - t0)
        out["cpu_s"].append(time.process_time() - c0)
        if load is not None:
            wall, lost = under_load(backend, all_reduce, t, load, out["time_s"][-1])
            out["loaded_time_s"].append(wall)
            out["loaded_cpu_s"].append(lost)
    measured = [k for k, v in out.items() if v]
    slowest = backend.all_reduce(torch.tensor([out[k] for k in measured], dtype=torch.float64), ReduceOp.MAX)
    return dict(zip(measured, slowest.tolist(), strict=True))


def undilated(measured: dict[str, list[float]], k: float) -> dict[str, list[float]]:
    """--dilation K: every time divided back by K (as the emulated cluster's, whose links are K times faster than the
    shaped ones and whose host K times faster than this one), the time as measured kept as `dilated_time_s`."""
    if k == 1.0:
        return measured
    return {**{key: [v / k for v in values] for key, values in measured.items()}, "dilated_time_s": measured["time_s"]}


def main() -> None:
    """One process: set the backend up, time its all-reduce at every size, and (the main process) write the result."""
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes")
    p.add_argument("--repeats", type=int, required=True)
    p.add_argument("--grad-compression", default="none", choices=tuple(GradCompression.__members__))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dilation", type=float, default=1.0, help="the link shaped K times slower: times divided by K")
    p.add_argument("--output", required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    env = process.current()
    spec = get_spec(a.backend)
    check_launch(a.backend, env)
    backend = spec.load()(env)
    backend.setup()
    load = Load() if backend.device.type == "cpu" and a.dilation == 1.0 else None
    sizes = [int(s) for s in a.sizes.split(",")]
    # the gradients' all-reduce; and where the library shards (ZeRO), its parameters' all-gather (after a ZeRO-1/2
    # step, in a ZeRO-3 forward) and its gradients' reduce-scatter (ZeRO-3), uncompressed (DeepSpeed gathers the
    # parameters in their own dtype); FSDP, which all-reduces nothing, its units' all-gathers and reduce-scatters
    sharded = ["all-gather", "reduce-scatter"] if spec.exchange != "all-reduce" and a.grad_compression == "none" else []
    collectives = sharded if spec.exchange == "reduce-scatter" else ["all-reduce", *sharded]
    results = {
        c: {
            str(size): undilated(time_collective(backend, size, a.repeats, a.grad_compression, load, c), a.dilation)
            for size in sizes
        }
        for c in collectives
    }
    if load is not None:
        load.stop()
    if backend.is_main:
        record = {
            "backend": a.backend,
            "world_size": backend.world_size,
            "launcher": env.launcher,
            "nodes": env.nodes,
            **link.dilated_view(link.observe(), a.dilation),  # the link as this process's namespace has it
            "dilation": a.dilation,
            "grad_compression": a.grad_compression,
            "measured": results,  # per collective, per size
        }
        write_json(Path(a.output), record)
    backend.barrier()
    backend.teardown()


if __name__ == "__main__":
    main()
    leave()  # gloo and torch._dynamo can abort a finishing process (distbench.leave)
