"""Start-up: distbench against the floor of each launcher, from the launch to the first exchange.

    python -m benchmarks.startup [--rounds 5] [--out docs/performance.md]

For single x1 (python), ddp x2 (torchrun), accelerate x2 (accelerate launch) and horovod x2 (horovodrun), each
round starts three programs with the same launcher command (the one `compare` runs, rendezvous on loopback):

- the *join floor*: benchmarks/handwritten/startup_floor.py: import torch and the library, join the process group,
  all-reduce one tensor;
- the *first-step floor*: the same with `--step`: also wrap a one-layer model and SGD the library's way and take one
  training step (its gradients exchanged);
- distbench: `run.py --backend B --max-steps 2` (MNIST on the bundled digits, offline), to the end of its first
  training step (`first_step_unix` in its record).

Each is timed from just before the launcher starts to the end of that exchange on the main process (unix time, one
clock). The three take turns at going first (A B C, B C A, C A B, ...), and the ratios distbench / floor are taken
within a round, so a slow minute of the machine hits all three alike. distbench's record splits its own start-up
into phases (`startup_phases_s`); the launcher's share is the time from the launch to the main process's start.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, last_json, machine, rotate, run_checked, write_section
from distbench.backends import REGISTRY
from distbench.launching.commands import command, usual_launcher
from distbench.launching.launch import local_argv, resolve
from distbench.training.timer import STARTUP_PHASES

SECTION = "## Start-up: launch to the first exchange, distbench against each launcher's floor"
# backend -> (world size, the floor's library idiom)
CASES = {"single": (1, "torch"), "ddp": (2, "ddp"), "accelerate": (2, "accelerate"), "horovod": (2, "horovod")}
FLOOR = "benchmarks/handwritten/startup_floor.py"


def floor_run(backend: str, step: bool) -> float:
    """Seconds from the launch to the end of the floor program's all-reduce (or first step)."""
    n, library = CASES[backend]
    program = [FLOOR, "--library", library, *(["--step"] if step else [])]
    cmd = resolve(local_argv(usual_launcher(backend), program, n))
    launched = time.time()
    return last_json(run_checked(cmd).stdout)["done_unix"] - launched


def distbench_run(backend: str, tmp: Path) -> dict:
    """Seconds from the launch to the end of distbench's first training step, and its start-up phases (with the
    launcher's: launch to the main process's start)."""
    n, _ = CASES[backend]
    out = tmp / f"{backend}-{time.monotonic_ns()}.json"
    cmd = command(backend, n, ["--max-steps", "2", "--no-progress", "--output", str(out)])
    launched = time.time()
    run_checked(cmd)
    rec = last_json(out.read_text().replace("\n", " "))
    process_start = rec["first_step_unix"] - rec["startup_s"]
    return {"total": rec["first_step_unix"] - launched, "launcher": process_start - launched, **rec["startup_phases_s"]}


def measure(backends: list[str], rounds: int, tmp: Path) -> dict[str, list[dict]]:
    """Per backend, one dict per round: the three programs' seconds and distbench's phases."""
    results: dict[str, list[dict]] = {b: [] for b in backends}
    for i in range(rounds):
        for backend in backends:
            sides = {
                "join": lambda b=backend: floor_run(b, step=False),
                "step": lambda b=backend: floor_run(b, step=True),
                "distbench": lambda b=backend: distbench_run(b, tmp),
            }
            got = {name: sides[name]() for name in rotate(i, list(sides))}
            row = {"join": got["join"], "step": got["step"], **{f"d_{k}": v for k, v in got["distbench"].items()}}
            results[backend].append(row)
            print(
                f"round {i + 1} {backend}: join floor {row['join']:.2f} s, first-step floor {row['step']:.2f} s, "
                f"distbench {row['d_total']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
    return results


def _median_ratios(rows: list[dict], floor: str) -> tuple[float, list[float]]:
    ratios = [r["d_total"] / r[floor] for r in rows]
    return statistics.median(ratios), ratios


def section(results: dict[str, list[dict]], rounds: int, command_line: str) -> list[str]:
    med = statistics.median
    lines = [
        SECTION,
        "",
        f"Produced by `{command_line}` ({rounds} rounds) on {machine()}. Each round starts, with the same launcher "
        "command, the join floor (import torch and the library, join the process group, all-reduce one tensor), the "
        "first-step floor (the same, then a one-layer model and SGD wrapped the library's way and one training step) "
        "and distbench (`run.py --max-steps 2`, MNIST on the bundled digits), each first in turn; seconds from the "
        "launch to the end of that exchange on the main process. Ratios are distbench / floor within a round "
        "(median, then each round's).",
        "",
        "| backend | launcher | join floor s | first-step floor s | distbench s | / join floor | / first-step floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend, rows in results.items():
        n, _ = CASES[backend]
        launcher = REGISTRY[backend].launchers[0]
        join, join_all = _median_ratios(rows, "join")
        step, step_all = _median_ratios(rows, "step")
        lines.append(
            f"| {backend} x{n} | {launcher} | {med(r['join'] for r in rows):.2f} | "
            f"{med(r['step'] for r in rows):.2f} | {med(r['d_total'] for r in rows):.2f} | **{join:.2f}** "
            f"({' '.join(f'{x:.2f}' for x in join_all)}) | **{step:.2f}** "
            f"({' '.join(f'{x:.2f}' for x in step_all)}) |"
        )
    phases = ["launcher", *STARTUP_PHASES]
    lines += [
        "",
        "distbench's start-up by phase (seconds, median over the rounds; `startup_phases_s` in the record, "
        "the launcher's share from the launch to the main process's start):",
        "",
        "| backend | " + " | ".join(p.replace("_", " ") for p in phases) + " | total |",
        "|---|" + "---|" * (len(phases) + 1),
    ]
    for backend, rows in results.items():
        cells = [med(r[f"d_{p}"] if p == "launcher" else r[f"d_{p}_s"] for r in rows) for p in phases]
        total = med(r["d_total"] for r in rows)
        lines.append(f"| {backend} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {total:.2f} |")
    return lines + [""]


def main(
    rounds: Annotated[int, typer.Option(help="Rounds; each runs the two floors and distbench once per backend.")] = 5,
    backends: Annotated[str, typer.Option(help="Comma-separated, of single, ddp, accelerate, horovod.")] = ",".join(
        CASES
    ),
    out: Annotated[Path, typer.Option(help="The document whose start-up section is replaced.")] = ROOT
    / "docs"
    / "performance.md",
) -> None:
    chosen = [b.strip() for b in backends.split(",") if b.strip()]
    unknown = [b for b in chosen if b not in CASES]
    if unknown or rounds <= 0:
        raise typer.BadParameter(f"backends of {', '.join(CASES)} and rounds > 0 (got {backends!r}, {rounds})")
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(chosen, rounds, Path(tmp))
    lines = section(results, rounds, "python -m benchmarks.startup " + " ".join(sys.argv[1:]))
    write_section(out, SECTION, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
