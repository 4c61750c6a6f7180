"""Does `run.py profile` time the step a run takes? Its forward+backward against a run's own forward_backward phase
(the step timer's, training/timer.py), the same task and micro-batch, alternating profile and run; into
docs/emulation.md.

    python -m benchmarks.profile_check [--pairs 5] [--batch-size 32] [--out docs/emulation.md]

Both run in one process at one thread (`single`), MNIST. The hooks the profile adds cost microseconds on the host
(tests/unit/test_profile.py times modules of known length); this checks that nothing else in the profile's step
departs from the run's.
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

from benchmarks.harness import ROOT, child_env, machine, write_section

SECTION = "## Checked: the profile's step against a run's"


def _profile(out: Path, batch: int, steps: int) -> float:
    args = ["profile", "--output", str(out), "--force", "--batch-size", str(batch), "--threads", "1"]
    subprocess.run(
        [sys.executable, "run.py", *args, "--steps", str(steps)],
        cwd=ROOT,
        env=child_env(),
        check=True,
        capture_output=True,
    )
    p = json.loads(out.read_text())
    return (p["forward"]["median_s"] + p["backward"]["median_s"]) * 1e3


def _run(out: Path, batch: int, steps: int) -> float:
    args = ["--backend", "single", "--batch-size", str(batch), "--threads", "1", "--no-progress", "--force"]
    subprocess.run(
        [sys.executable, "run.py", *args, "--max-steps", str(steps + 10), "--output", str(out)],
        cwd=ROOT,
        env=child_env(),
        check=True,
        capture_output=True,
    )
    return json.loads(out.read_text())["step_breakdown_ms"]["forward_backward_ms"]


def verdict(ratios: list[float]) -> str:
    """What the ratios say: no difference where they fall on both sides of 1, else which way and by how much."""
    if min(ratios) <= 1 <= max(ratios):
        return (
            "the pairs fall on both sides of 1: no difference between the profile's step and the run's that this "
            "check can see."
        )
    way = "longer" if min(ratios) > 1 else "shorter"
    return f"the profile's step was {way} than the run's in every pair: it does not time the run's step."


def main(
    pairs: Annotated[int, typer.Option(help="Profile and run pairs, alternating which goes first.")] = 5,
    batch_size: Annotated[int, typer.Option(help="The micro-batch.")] = 32,
    steps: Annotated[int, typer.Option(help="Steps each measures.")] = 40,
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "emulation.md",
) -> None:
    ratios, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(pairs):
            first, second = (_profile, _run) if i % 2 == 0 else (_run, _profile)
            got = {f.__name__: f(Path(tmp) / f"{f.__name__}.json", batch_size, steps) for f in (first, second)}
            ratios.append(got["_profile"] / got["_run"])
            rows.append(f"| {i + 1} | {got['_profile']:.2f} | {got['_run']:.2f} | {ratios[-1]:.3f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    lines = [
        SECTION,
        "",
        f"Produced by `python -m benchmarks.profile_check --pairs {pairs} --batch-size {batch_size} --steps {steps}` "
        "on "
        f"{machine()}. MNIST, micro-batch {batch_size}, one process at one thread; forward+backward, median ms over "
        f"{steps} steps each, profile and run alternating which goes first.",
        "",
        "| pair | profile | run | profile / run |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Median ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}): "
        + verdict(ratios),
        "",
    ]
    write_section(out, SECTION, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
