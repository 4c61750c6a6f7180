"""Where DeepSpeed's engine spends a ZeRO step, by its own timers: `wall_clock_breakdown` on, every stage at two ranks,
MNIST, alternating stages; the medians over every step of every run, into docs/projection.md.

    python -m benchmarks.zero_timers [--runs 2] [--steps 300] [--out docs/projection.md]

Each run is distbench's own (`torchrun --nproc_per_node 2 run.py --backend deepspeed --zero-stage K`), its ds_config
with `"wall_clock_breakdown": true` (DeepSpeed's timers of forward, backward, the backward's all-reduce, the step, and
at stages 1-2 the step's all-gather, gradient bookkeeping and the optimizer's own step), printed by rank 0 every 50
steps and once per step in its `time (ms)` lines. A benchmark, not a run option: the timers synchronise nothing on a
CPU but print on every step.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env, machine, write_section

SECTION = "## DeepSpeed's engine by its own timers: where a ZeRO-1/2 step goes"
STAGES = (0, 1, 2)
TIMERS = ("fwd", "bwd_inner", "bwd_allreduce", "step", "optimizer_allgather", "optimizer_gradients", "optimizer_step")
LINE = re.compile(r"\[Rank 0\] time \(ms\) \| (fwd|optimizer_allgather): ")


def worker() -> None:
    """In each process (`python -m benchmarks.zero_timers worker RUN ARGS`): distbench's run with the timers on."""
    from distbench.backends import deepspeed_backend

    made = deepspeed_backend.ds_config

    def with_timers(backend, micro_batch: int) -> dict:
        return made(backend, micro_batch) | {"wall_clock_breakdown": True, "steps_per_print": 50}

    deepspeed_backend.ds_config = with_timers
    from distbench import leave
    from distbench.cli import main

    leave(main(sys.argv[2:]))  # as run.py leaves (gloo can abort a finishing process: distbench.leave)


def timed(stage: int, steps: int, out: Path) -> dict[str, list[float]]:
    """One run at `stage`: rank 0's per-step timers, each timer's values."""
    args = ["--backend", "deepspeed", "--zero-stage", str(stage), "--max-steps", str(steps), "--threads", "1"]
    args += ["--dropout", "0", "--no-progress", "--output", str(out), "--force"]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "benchmarks.zero_timers"]
    proc = subprocess.run([*launch, "worker", *args], cwd=ROOT, env=child_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"stage {stage}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    got: dict[str, list[float]] = defaultdict(list)
    for line in (proc.stdout + proc.stderr).splitlines():
        if LINE.search(line):
            for name, value in re.findall(r"(\w+): ([0-9.]+)", line):
                got[name].append(float(value))
    return got


def main(
    runs: Annotated[int, typer.Option(help="runs of each stage, stages alternating")] = 2,
    steps: Annotated[int, typer.Option(help="steps of each run")] = 300,
    out: Annotated[Path, typer.Option(help="the document whose section is written")] = ROOT / "docs" / "projection.md",
) -> None:
    by_stage: dict[int, dict[str, list[float]]] = {k: defaultdict(list) for k in STAGES}
    with tempfile.TemporaryDirectory() as tmp:  # the runs' records: only their timers are kept
        for i in range(runs):
            for stage in STAGES if i % 2 == 0 else STAGES[::-1]:
                for name, values in timed(stage, steps, Path(tmp) / f"zero{stage}.json").items():
                    by_stage[stage][name] += values
    header = "| stage | " + " | ".join(TIMERS) + " | steps timed |"
    lines = [
        SECTION,
        "",
        f"Produced by `python -m benchmarks.zero_timers --runs {runs} --steps {steps}` on {machine()}: MNIST, global "
        "batch 64, 2 processes on one node (loopback, gloo), one thread each, DeepSpeed's `wall_clock_breakdown`; "
        "rank 0's median ms per step over every step of every run (runs of the stages alternating). `step` holds, at "
        "stages 1-2, the all-gather, the gradients' bookkeeping and the optimizer's step, and the gradients' norm "
        "(computed on the host and all-reduced), which has no timer of its own: `step` less the three.",
        "",
        header,
        "|" + "---|" * (len(TIMERS) + 2),
    ]
    for stage, got in by_stage.items():
        cells = [f"{statistics.median(got[t]):.2f}" if got.get(t) else "—" for t in TIMERS]
        lines.append(f"| {stage} | " + " | ".join(cells) + f" | {len(got.get('fwd', []))} |")
    write_section(out, SECTION, [*lines, ""])
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker()
    else:
        typer.run(main)
