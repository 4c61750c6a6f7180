"""distbench's horovod backend beside Horovod's own synthetic benchmark, at the same model, batch and processes.

    python -m benchmarks.horovod_synthetic --script PATH/pytorch_synthetic_benchmark.py [--pairs 5] [--np 2]
        [--model resnet18] [--batch-size 8] [--iters 3] [--batches-per-iter 5] [--out docs/performance.md]

PATH is `examples/pytorch/pytorch_synthetic_benchmark.py` of a Horovod checkout (git clone of horovod/horovod;
Horovod's release archive does not ship it); nothing of it is copied here. Each round runs, one after the
other: the script (`horovodrun -np N python SCRIPT --no-cuda ...`, OMP_NUM_THREADS = cores / N, its total
img/sec), distbench's `--task synthetic-resnet` under horovodrun with the same model, per-process batch,
threads and warm-up (samples/s of its steady-state window). Pinning is measured on both sides, since it is
what differs most between them by default: the script as Horovod ships it (no pinning) against distbench
`--no-pin-cores`, and the script with each process pinned (before its interpreter starts) to the cores distbench's
default pinning gives that local rank against distbench's default. Each round runs the four, the script's first in odd
rounds and distbench's in even ones; the table holds the median of the per-round ratios distbench / script at
the same pinning.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env, machine, replace_section
from distbench.launching.commands import command
from distbench.launching.launch import HOROVODRUN, local_argv, resolve
from distbench.machine import available_cpus
from distbench.training.timer import WARMUP_MAX

SECTION = "## Against Horovod's own synthetic benchmark"
WARMUP = WARMUP_MAX  # distbench's warm-up (timer.warmup_steps) for these runs; the script is given the same


# Each process of the script on the block of cores distbench's pinning gives its local rank
# (distbench/launching/affinity.py: by position among the usable cores), set before the script's interpreter starts,
# so every thread inherits it.
PIN_BY_LOCAL_RANK = (
    "import os, sys; t, r = {t}, int(os.environ['HOROVOD_LOCAL_RANK']); "
    "os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[r * t : (r + 1) * t]); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def horovod_script(
    script: Path, n: int, model: str, batch: int, iters: int, per_iter: int, threads: int, pin: bool = False
) -> float:
    program = [
        str(script),
        "--no-cuda",
        "--model",
        model,
        "--batch-size",
        str(batch),
        "--num-warmup-batches",
        str(WARMUP),
        "--num-batches-per-iter",
        str(per_iter),
        "--num-iters",
        str(iters),
    ]
    cmd = resolve(local_argv(HOROVODRUN, program, n))
    if pin:
        at = cmd.index(sys.executable)
        cmd[at:at] = [sys.executable, "-c", PIN_BY_LOCAL_RANK.format(t=threads)]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**child_env(), "OMP_NUM_THREADS": str(threads)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    m = re.search(r"Total img/sec on \d+ CPU\(s\): ([\d.]+)", proc.stdout)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    return float(m[1])


def distbench(n: int, model: str, batch: int, steps: int, threads: int, tmp: Path, pin: bool) -> float:
    out = tmp / f"d-{pin}.json"
    args = [
        "--task",
        "synthetic-resnet",
        "--model",
        model,
        "--batch-size",
        str(batch * n),
        "--max-steps",
        str(steps),
        "--threads",
        str(threads),
        "--no-progress",
        "--output",
        str(out),
        "--force",
        *([] if pin else ["--no-pin-cores"]),
    ]
    proc = subprocess.run(
        command("horovod", n, args),
        cwd=ROOT,
        env={**child_env(), "OMP_NUM_THREADS": str(threads)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"distbench failed:\n{proc.stderr[-2000:]}")
    return json.loads(out.read_text())["samples_per_sec"]


def table(rows: list[tuple[float, float, float, float]]) -> list[str]:
    """Rows (script unpinned, distbench unpinned, script pinned, distbench pinned): distbench / script at the
    same pinning, and what pinning gives each side."""
    med = statistics.median

    def line(label: str, a: int, b: int) -> str:
        ratios = [r[b] / r[a] for r in rows]
        return (
            f"| {label} | {med(r[a] for r in rows):.2f} | {med(r[b] for r in rows):.2f} | **{med(ratios):.3f}** "
            f"| {' '.join(f'{x:.3f}' for x in ratios)} |"
        )

    return [
        "| | A img/s | B img/s | B / A (median) | per round |",
        "|---|---|---|---|---|",
        line("unpinned: A = Horovod's script, B = distbench `--no-pin-cores`", 0, 1),
        line("pinned: A = Horovod's script, pinned as distbench pins, B = distbench (default)", 2, 3),
        line("pinning, Horovod's script: A = unpinned, B = pinned", 0, 2),
        line("pinning, distbench: A = `--no-pin-cores`, B = default", 1, 3),
    ]


def main(
    script: Annotated[Path, typer.Option(help="Horovod's examples/pytorch/pytorch_synthetic_benchmark.py.")],
    pairs: Annotated[int, typer.Option(help="Rounds (each: both unpinned, then both pinned).")] = 5,
    np_: Annotated[int, typer.Option("--np", help="Processes.")] = 2,
    model: Annotated[str, typer.Option(help="torchvision ResNet.")] = "resnet18",
    batch_size: Annotated[int, typer.Option(help="Per-process batch (the script's --batch-size).")] = 8,
    iters: Annotated[int, typer.Option(help="The script's --num-iters.")] = 3,
    batches_per_iter: Annotated[int, typer.Option(help="The script's --num-batches-per-iter.")] = 5,
    out: Annotated[Path | None, typer.Option(help="Replace this file's section with the table.")] = None,
) -> None:
    if not script.is_file():
        raise SystemExit(f"error: --script {script} does not exist (Horovod's examples/pytorch/...)")
    threads = max(1, available_cpus() // np_)
    steps = WARMUP + iters * batches_per_iter
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(pairs):
            measured = {}
            for side, pin in itertools.product(("script", "distbench")[:: 1 if i % 2 == 0 else -1], (False, True)):
                measured[side, pin] = (
                    horovod_script(script, np_, model, batch_size, iters, batches_per_iter, threads, pin)
                    if side == "script"
                    else distbench(np_, model, batch_size, steps, threads, Path(d), pin)
                )
            script_free, ours_free = measured["script", False], measured["distbench", False]
            script_pinned, ours_pinned = measured["script", True], measured["distbench", True]
            rows.append((script_free, ours_free, script_pinned, ours_pinned))
            print(
                f"round {i + 1}: unpinned: script {script_free:.2f}, distbench {ours_free:.2f}; pinned: script "
                f"{script_pinned:.2f}, distbench {ours_pinned:.2f} img/s",
                file=sys.stderr,
                flush=True,
            )
    section = [
        SECTION,
        "",
        f"Produced by `python -m benchmarks.horovod_synthetic {' '.join(sys.argv[1:])}` on {machine()}. Horovod's "
        f"`pytorch_synthetic_benchmark.py` (`--no-cuda --model {model} --batch-size {batch_size} "
        f"--num-warmup-batches {WARMUP} --num-batches-per-iter {batches_per_iter} --num-iters {iters}`, its total "
        "img/sec) and distbench's "
        f"horovod backend on `--task synthetic-resnet --model {model}` at the same per-process batch (global "
        f"{batch_size * np_}), {np_} processes of {threads} thread(s) under horovodrun, {steps} steps of which "
        f"{WARMUP} warm-up. Each round runs four: both unpinned (the script as Horovod ships it, distbench "
        "`--no-pin-cores`) and both pinned (the script's processes on the cores distbench's "
        "default pinning gives each local rank, distbench as it runs by default), the script's two first in odd "
        "rounds, distbench's in even ones. Differences by construction: the "
        "script reuses one random batch, distbench draws each batch from the seed; the script times "
        f"{batches_per_iter}-batch iterations on rank 0, distbench a barrier-bounded window.",
        "",
        *table(rows),
        "",
    ]
    print("\n".join(section))
    if out is not None:
        out.write_text(replace_section(out.read_text(), SECTION, section).rstrip("\n") + "\n")


if __name__ == "__main__":
    typer.run(main)
