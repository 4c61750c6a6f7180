"""Gradient accumulation and compression under each library, measured: docs/knobs.md.

    python -m benchmarks.knobs [--repeats 3] [--steps 100] [--out docs/knobs.md]

Runs `run.py compare` over ddp, accelerate and horovod at world size 2 with `--accumulate 1,4` and
`--grad-compression none,fp16` (MNIST, dropout off so that the final losses compare), in shuffled rounds, and
writes each configuration's throughput (median and interval), final loss and bytes written per step, with
the paired verdict of each setting against the same backend's plain run (accumulate 1, no compression).
"""

from __future__ import annotations

import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, replace_section
from distbench.machine import available_cpus
from distbench.sweep import stats
from distbench.sweep.grouping import configurations, load
from distbench.sweep.verdicts import config_row

BACKENDS = ("ddp", "accelerate", "horovod")


SWEEP_FORM = (
    "python run.py compare --task mnist --backends ddp,accelerate,horovod --nprocs 2 --accumulate 1,4 "
    "--grad-compression none,fp16 --max-steps STEPS --repeats REPEATS --extra '--dropout 0' --out DIR"
)


def sweep(out: Path, repeats: int, steps: int) -> str:
    cmd = [
        sys.executable,
        *"run.py compare --task mnist --backends".split(),
        ",".join(BACKENDS),
        *"--nprocs 2 --accumulate 1,4 --grad-compression none,fp16 --max-steps".split(),
        str(steps),
        "--repeats",
        str(repeats),
        "--extra",
        "--dropout 0",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return SWEEP_FORM.replace("STEPS", str(steps)).replace("REPEATS", str(repeats))


def table(out: Path) -> list[str]:
    records = load([out]).records
    configs = [c for c in configurations(records) if c.backend in BACKENDS]
    lines = [
        "| backend x2 | accumulate | compression | samples/s median (95 % CI, or min-max) | vs plain (paired) | "
        "final loss | bytes written per step | runs ok |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in configs:
        row = config_row(c, configs)
        plain = next(p for p in configs if (p.backend, p.accumulate, p.grad_compression) == (c.backend, 1, "none"))
        if c is plain:
            versus = "—"
        else:
            ratio = stats.summarize(stats.paired_ratios(c.by_round(), plain.by_round()))
            versus = stats.verdict(f"acc{c.accumulate} {c.grad_compression}", "plain", ratio)
        written = c.median("written_bytes_per_step")
        lines.append(
            f"| {c.backend} | {c.accumulate} | {c.grad_compression} | {row['samples_per_sec']:.0f} ({_spread(row)}) | "
            f"{versus} | "
            f"{row['final_loss']:.4f} | {written:,.0f} | {row['runs_ok']}/{row['runs']} |"
        )
    return lines


def _spread(row: dict) -> str:
    """The median's 95 % interval, or with too few rounds for one, the min-max (said so)."""
    if row.get("samples_per_sec_lo") is not None:
        return f"{row['samples_per_sec_lo']:.0f}-{row['samples_per_sec_hi']:.0f}"
    return f"min-max {row['samples_per_sec_min']:.0f}-{row['samples_per_sec_max']:.0f}"


def main(
    repeats: Annotated[int, typer.Option(help="Rounds of the sweep.")] = 3,
    steps: Annotated[int, typer.Option(help="Optimizer steps per run.")] = 100,
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "knobs.md",
    keep: Annotated[Path | None, typer.Option(help="Keep the sweep folder here (default: a temporary one).")] = None,
    from_sweep: Annotated[
        Path | None, typer.Option(help="Write the table from a sweep kept earlier (--keep) instead of running one.")
    ] = None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = from_sweep or keep or Path(tmp) / "knobs"
        command = SWEEP_FORM if from_sweep else sweep(folder, repeats, steps)
        lines = table(folder)
    section = [
        MEASURED,
        "",
        f"Produced by `python -m benchmarks.knobs --repeats {repeats} --steps {steps}` on {datetime.now(UTC).date()}: "
        f"{platform.machine()}, {available_cpus()} cores, {platform.platform()}, CPU only (gloo); the sweep it runs: "
        f"`{command}`. MNIST ConvNet, global batch 64 in every configuration (with `--accumulate 4`: 4 "
        f"micro-batches of 8 per process), 1 thread per process, dropout off, {steps} optimizer steps per run, "
        f"{repeats} rounds in shuffled order. Bytes written per step: the record's `written_bytes_per_step` "
        "(/proc/self/io over the timed window, mean over ranks): on gloo, the gradient exchange itself.",
        "",
        *lines,
        "",
    ]
    text = out.read_text() if out.exists() else TITLE
    out.write_text(replace_section(text, MEASURED, section).rstrip("\n") + "\n")  # other sections are kept
    print("\n".join(section))


TITLE = "# Gradient accumulation and compression, library by library\n"
MEASURED = "## Measured at world size 2"

if __name__ == "__main__":
    typer.run(main)
