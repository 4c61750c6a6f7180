"""Where DDP's scaling goes on this machine: the step of 2 processes taken apart, one cost at a time.

    python -m benchmarks.scaling [--rounds 3] [--steps 300] [--out docs/performance.md --append]
    python -m benchmarks.scaling --soak 50     # the all-reduce worker x2 50 times in a row: any crash?

Every configuration is the MNIST ConvNet with 1 thread per process, distbench's data path (digits decoded
once, a batch fetched with one indexing operation) and Adadelta, timed over the same steady-state steps:

  single b32 / b64     one process, batch 32 or 64: the per-process work of world size 2 at global batch
                       64 (strong scaling) and 128 (weak scaling)
  x2 independent       2 processes, no communication and no synchronisation at all
  x2 lockstep          2 processes, no gradient communication, but a barrier after every step, so each
                       step waits for the slower process (what any synchronous data-parallel step pays)
  x2 ddp               2 processes under DistributedDataParallel as distbench runs it (1 MB buckets on CPU)
  x2 ddp, global 128   the same at 64 samples per process (weak scaling)
  x2 all-reduce        the model's gradients (one flat tensor of the same size) all-reduced over and over,
                       with no computation: what the communication costs on an otherwise idle machine
  x2 horovod           the same two under Horovod's DistributedOptimizer (horovodrun, gloo), one
                       all-reduce per gradient as in Horovod's examples, and with all gradients in one
                       grouped all-reduce (DistributedOptimizer(groups=1))

Processes are pinned to a core each after the library's setup, as distbench does (distbench/launching/affinity.py),
except in the row marked "not pinned". Configurations run one after another, and the whole list repeats
--rounds times (alternating, so a noisy minute hits all of them); the table holds medians. Efficiency is
samples/s over twice `single` with the same per-process batch.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env, last_json
from distbench import leave

# (label, processes, mode, global batch, per-process baseline batch, pin each process to its own core)
CONFIGS = [
    ("single, batch 32", 1, "independent", 32, None, False),
    ("single, batch 64", 1, "independent", 64, None, False),
    ("x2 independent, 32 each", 2, "independent", 64, 32, True),
    ("x2 lockstep (barrier per step), 32 each", 2, "lockstep", 64, 32, True),
    ("x2 ddp, global 64, not pinned", 2, "ddp", 64, 32, False),
    ("x2 ddp, global 64 (strong)", 2, "ddp", 64, 32, True),
    ("x2 ddp, global 128 (weak)", 2, "ddp", 128, 64, True),
    ("x2 horovod, global 64 (strong)", 2, "horovod", 64, 32, True),
    ("x2 horovod, global 128 (weak)", 2, "horovod", 128, 64, True),
    ("x2 horovod, one grouped all-reduce, global 64", 2, "horovod-grouped", 64, 32, True),
    ("x2 all-reduce of the gradients alone, torch.distributed (gloo)", 2, "allreduce-ddp", 64, None, True),
    ("x2 all-reduce of the gradients alone, horovod (gloo)", 2, "allreduce-horovod", 64, None, True),
]


def worker(mode: str, batch: int, steps: int, warmup: int, pin: bool) -> None:
    """One process of a configuration (started by torchrun); rank 0 prints one JSON line."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from distbench.backends.ddp import bucket_kwargs
    from distbench.data.mnist import load_mnist
    from distbench.launching.affinity import pin_process
    from distbench.models.convnet import ConvNet

    if "horovod" in mode:
        import horovod.torch as hvd

        hvd.init()
        rank, world, barrier = hvd.rank(), hvd.size(), hvd.barrier
    else:
        dist.init_process_group("gloo")
        rank, world, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
    torch.set_num_threads(1)
    if pin:
        pin_process(rank, world, 1)
    train, _test, _info = load_mnist(None)
    per_rank = batch // world
    torch.manual_seed(0)
    model = ConvNet()
    if mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, **bucket_kwargs(torch.device("cpu"), model))
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)
    if mode.startswith("horovod"):
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        groups = 1 if mode == "horovod-grouped" else None
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), groups=groups)
    gen = torch.Generator().manual_seed(0)
    n = len(train) // batch * batch
    order = torch.randperm(len(train), generator=gen)[:n].view(-1, batch)
    # the all-reduce rows: the model's gradients (as one flat tensor) averaged, no computation at all
    flat = torch.randn(sum(p.numel() for p in model.parameters()))

    def train_step(step: int) -> None:
        idx = order[step % len(order), rank * per_rank : (rank + 1) * per_rank]
        x, y = train.__getitems__(idx.tolist())
        optimizer.zero_grad()
        F.nll_loss(model(x), y).backward()
        optimizer.step()
        if mode == "lockstep":
            barrier()

    def allreduce_step(step: int) -> None:
        if mode == "allreduce-horovod":
            hvd.allreduce_(flat, op=hvd.Average, name="flat")
        else:
            dist.all_reduce(flat)

    one_step = allreduce_step if mode.startswith("allreduce") else train_step
    times = []
    for step in range(warmup + steps):
        if step == warmup:
            barrier()
            start = time.perf_counter()
        t0 = time.perf_counter()
        one_step(step)
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        times.sort()
        print(
            json.dumps(
                {
                    "samples_per_sec": batch * steps / elapsed,
                    "p50_ms": 1e3 * times[len(times) // 2],
                    "p90_ms": 1e3 * times[int(0.9 * len(times))],
                }
            )
        )
    if "horovod" in mode:
        hvd.shutdown()
    else:
        dist.destroy_process_group()
    leave()  # the work is done and reported (distbench.leave: pytorch/pytorch#179291)


def run_config(nprocs: int, mode: str, batch: int, steps: int, warmup: int, pin: bool, **extra_env: str) -> dict:
    from distbench.launching.launch import HOROVODRUN, TORCHRUN, local_argv, resolve

    argv = [
        "-m",
        "benchmarks.scaling",
        "--worker",
        mode,
        "--batch",
        str(batch),
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--pin" if pin else "--no-pin",
    ]
    env = child_env(OMP_NUM_THREADS="1", **extra_env)
    launcher = HOROVODRUN if "horovod" in mode else TORCHRUN
    cmd = resolve(local_argv(launcher, argv, nprocs))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        # the workers' own output comes first; the launcher's report of the failure follows it
        own = proc.stderr.split("Traceback (most recent call last)")[0].strip()
        raise RuntimeError(
            f"scaling worker {mode} x{nprocs} failed (exit {proc.returncode}); the workers' stderr:\n"
            f"{own[-3000:]}\n--- the launcher's report:\n{proc.stderr[len(own) :][-1500:]}"
        )
    return last_json(proc.stdout)


def horovod_timeline_section(steps: int, warmup: int) -> list[str]:
    """Run Horovod x2 at global batch 64 with HOROVOD_TIMELINE and tabulate, per gradient tensor, how long
    its negotiation (from ready on this rank until every rank has it ready) and its gloo all-reduce took."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "timeline.json"
        run_config(2, "horovod", 64, steps, warmup, True, HOROVOD_TIMELINE=str(path))
        text = path.read_text().rstrip().rstrip(",")  # the file is a JSON array Horovod may leave unclosed
        events = json.loads(text if text.endswith("]") else text + "]")
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name" and "name" in e["args"]}
    open_, phases = {}, {}
    for e in events:
        if e.get("ph") == "B":
            open_.setdefault(e["pid"], []).append(e)
        elif e.get("ph") == "E" and open_.get(e["pid"]):
            begin = open_[e["pid"]].pop()
            phases.setdefault((names.get(e["pid"], "?"), begin["name"]), []).append((e["ts"] - begin["ts"]) / 1e3)
    tensors = sorted({t for t, _ in phases if t.startswith("allreduce.")})
    lines = [
        "",
        "### Horovod's timeline at world size 2, global batch 64 (rank 0, median ms per step)",
        "",
        f"`HOROVOD_TIMELINE` over {steps} steps. Negotiation runs from the moment this rank's gradient is "
        "ready until every rank has reported it; the gloo all-reduce is the data transfer of the fused "
        "buffer the tensor travelled in.",
        "",
        "| gradient | negotiation | gloo all-reduce |",
        "|---|---|---|",
    ]
    for t in tensors:
        neg = statistics.median(phases.get((t, "NEGOTIATE_ALLREDUCE"), [float("nan")]))
        red = statistics.median(phases.get((t, "GLOO_ALLREDUCE"), [float("nan")]))
        lines.append(f"| {t.removeprefix('allreduce.')} | {neg:.2f} | {red:.2f} |")
    return lines


def soak_worker(runs: int, mode: str, steps: int, warmup: int) -> int:
    """The worker x2 `runs` times in a row (the SIGABRT of issue 17 came once in a few runs before the fix);
    prints each crash's own stderr and the count; returns the exit code."""
    crashed = 0
    for i in range(1, runs + 1):
        try:
            run_config(2, mode, 64, steps, warmup, True)
        except RuntimeError as e:
            crashed += 1
            print(f"run {i}: {e}", file=sys.stderr, flush=True)
        print(f"run {i}/{runs}: {crashed} crashed so far", file=sys.stderr, flush=True)
    print(f"{mode} x2: {runs} runs in a row, {crashed} crashed")
    return 1 if crashed else 0


def main(
    rounds: Annotated[int, typer.Option(help="Times the whole list of configurations runs.")] = 3,
    steps: Annotated[int, typer.Option(help="Timed steps per run, after 10 warm-up steps.")] = 300,
    out: Annotated[Path | None, typer.Option(help="Write the markdown tables here.")] = None,
    append: Annotated[bool, typer.Option(help="Append to --out (e.g. docs/performance.md) instead.")] = False,
    worker_mode: Annotated[str | None, typer.Option("--worker", hidden=True)] = None,
    batch: Annotated[int, typer.Option(hidden=True)] = 64,
    warmup: Annotated[int, typer.Option(hidden=True)] = 10,
    pin: Annotated[bool, typer.Option("--pin/--no-pin", hidden=True)] = True,
    soak: Annotated[
        int, typer.Option(help="Instead: run the all-reduce worker x2 this many times in a row; exit 1 on any crash.")
    ] = 0,
    soak_mode: Annotated[str, typer.Option(help="The worker --soak runs.")] = "allreduce-ddp",
    modes: Annotated[
        str | None,
        typer.Option(
            help="Only the configurations of these worker modes (comma-separated), e.g. "
            "independent,ddp; the single runs (mode independent) are the efficiency's base."
        ),
    ] = None,
) -> None:
    if worker_mode:
        worker(worker_mode, batch, steps, warmup, pin)
        return
    if soak:
        raise typer.Exit(soak_worker(soak, soak_mode, steps, warmup))
    configs = [c for c in CONFIGS if modes is None or c[2] in modes.split(",")]
    results: dict[str, list[dict]] = {c[0]: [] for c in configs}
    for r in range(rounds):
        for label, nprocs, mode, gbatch, _base, pinned in configs:
            rec = run_config(nprocs, mode, gbatch, steps, warmup, pinned)
            results[label].append(rec)
            print(f"round {r + 1}: {label}: {rec['samples_per_sec']:.0f} samples/s", file=sys.stderr, flush=True)
    med = {label: statistics.median(x["samples_per_sec"] for x in recs) for label, recs in results.items()}
    single = {32: med.get("single, batch 32"), 64: med.get("single, batch 64")}
    lines = [
        "## Where the scaling goes: DDP at world size 2 taken apart",
        "",
        f"Produced by `python -m benchmarks.scaling {' '.join(sys.argv[1:])}` on {datetime.now(UTC).date()}: "
        f"{os.cpu_count()} cores, {platform.platform()}. MNIST ConvNet, 1 thread per process, distbench's data "
        "path, Adadelta; median over the rounds (configurations alternate within each round).",
        "",
        "| configuration | samples/s (median) | per round | step p50 / p90 ms | efficiency vs 2 x single |",
        "|---|---|---|---|---|",
    ]
    for label, _nprocs, mode, _gbatch, base, _pinned in configs:
        recs = results[label]
        p50 = statistics.median(x["p50_ms"] for x in recs)
        p90 = statistics.median(x["p90_ms"] for x in recs)
        eff = f"**{med[label] / (2 * single[base]):.3f}**" if base and single[base] else "—"
        per = " ".join(f"{x['samples_per_sec']:.0f}" for x in recs)
        if mode.startswith("allreduce"):  # no samples: only the time of one all-reduce counts
            lines.append(f"| {label} | — | — | {p50:.2f} / {p90:.2f} | — |")
        else:
            lines.append(f"| {label} | {med[label]:.0f} | {per} | {p50:.1f} / {p90:.1f} | {eff} |")
    if any(c[2] == "horovod" for c in configs):
        lines += horovod_timeline_section(steps, warmup)
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "a" if append else "w", encoding="utf-8") as f:
            f.write(("\n" if append else "") + text)


if __name__ == "__main__":
    typer.run(main)
