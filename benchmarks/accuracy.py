"""MNIST accuracy per backend: every backend trains the default configuration for 5 epochs.

    python -m benchmarks.accuracy [--seeds 0,1,2] [--nprocs 2] [--out docs/accuracy.md]

Each backend runs at --nprocs processes with its own launcher (single: one process), evaluating after
every epoch. The table gives the accuracy after each epoch, the best within the epochs, and the
median over seeds; it is written to --out together with the command that produced it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT
from distbench.backends import REGISTRY
from distbench.launching.commands import command


def main(
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds.")] = "0,1,2",
    nprocs: Annotated[int, typer.Option(help="Processes for ddp/accelerate/horovod.")] = 2,
    backends: Annotated[str, typer.Option()] = "single,ddp,accelerate,horovod",
    epochs: Annotated[int, typer.Option()] = 5,
    target: Annotated[float, typer.Option()] = 0.96,
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "accuracy.md",
    task_args: Annotated[str, typer.Option(help="Extra run.py arguments.")] = "",
) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends.split(","):
            n = nprocs if REGISTRY[backend].distributed else 1
            for seed in [int(s) for s in seeds.split(",")]:
                rec_path = Path(tmp) / f"{backend}-{seed}.json"
                args = [
                    "--epochs",
                    str(epochs),
                    "--seed",
                    str(seed),
                    "--target-accuracy",
                    str(target),
                    "--no-progress",
                    "--output",
                    str(rec_path),
                    *task_args.split(),
                ]
                cmd = command(backend, n, args)
                print(f"[{len(rows) + 1}] {' '.join(cmd[-len(args) - 3 :])}", file=sys.stderr, flush=True)
                subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
                rec = json.loads(rec_path.read_text())
                accs = [e["accuracy"] for e in rec["eval_history"]]
                rows.append((backend, rec["world_size"], seed, accs, rec["samples_per_sec"], rec["time_to_target_s"]))
    lines = [
        f"# MNIST accuracy per backend ({epochs} epochs, target {target})",
        "",
        "Produced by `python -m benchmarks.accuracy"
        + (f" --seeds {seeds}" if seeds != "0,1,2" else "")
        + (f" --nprocs {nprocs}" if nprocs != 2 else "")
        + "` on the bundled offline split (4,500 train / 500 test digits), default configuration "
        "(global batch 64, Adadelta lr 0.5, dropout on). Accuracy after each epoch; 'best' is the highest "
        "within the epochs; samples/s is the steady-state global throughput of that run.",
        "",
        "| backend | world | seed | accuracy per epoch | best | final | reached target | samples/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backend, world, seed, accs, sps, ttt in rows:
        per_epoch = " ".join(f"{a:.3f}" for a in accs)
        reached = f"yes ({ttt:.1f} s)" if ttt is not None else "no"
        lines.append(
            f"| {backend} | {world} | {seed} | {per_epoch} | {max(accs):.3f} | {accs[-1]:.3f} | {reached} | {sps:.0f} |"
        )
    lines += [
        "",
        "Median over seeds:",
        "",
        "| backend | world | median best | median final | runs reaching target |",
        "|---|---|---|---|---|",
    ]
    for backend in backends.split(","):
        mine = [r for r in rows if r[0] == backend]
        best = statistics.median(max(r[3]) for r in mine)
        final = statistics.median(r[3][-1] for r in mine)
        hits = sum(r[5] is not None for r in mine)
        lines.append(f"| {backend} | {mine[0][1]} | {best:.3f} | {final:.3f} | {hits}/{len(mine)} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
