"""The projection of DeepSpeed's ZeRO stages 0-2 validated (docs/projection.md): predict, then measure, then compare.

    python -m benchmarks.zero_projection commbench   # DeepSpeed's all-reduce (deepspeed.comm) on per-node links
    python -m benchmarks.zero_projection reference   # MNIST `single` x1 runs, the other core computing (as a node's)
    python -m benchmarks.zero_projection predict     # `run.py project --zero-stage K` for every case, nothing measured
    python -m benchmarks.zero_projection measure     # the same cases with `run.py compare` (refused before predict)
    python -m benchmarks.zero_projection table       # predicted against measured, into docs/projection.md

and then the model revised after that table (DeepSpeed's engine's own time per step, measured at x1):

    python -m benchmarks.zero_projection engine-reference  # deepspeed x1 at stages 0-2 beside `single` x1
    python -m benchmarks.zero_projection revised           # every case again, and two held-out rates, before measuring
    python -m benchmarks.zero_projection measure-heldout   # the held-out rates (refused before revised)
    python -m benchmarks.zero_projection table             # both tables

The third model's procedure (benchmarks/projection.py: commbench under load, the reference with the other core
computing, 2 simulated nodes x 1 process on per-node links, one thread each), for `--backends deepspeed` at ZeRO
stages 0, 1 and 2 and three rates. Everything goes under docs/results/projection/zero/; each step is the commands a
user types.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import typer

from benchmarks.harness import ROOT, machine, write_section
from benchmarks.projection import (
    LOADED_SIZES,
    NODES,
    PER_NODE,
    TASK_ARGS,
    _summary,
    co_runner,
    recorded_machine,
    run,
    single_runs,
)

OUT = ROOT / "docs" / "results" / "projection" / "zero"
RATES = ("none", "1gbit", "100mbit")
HELDOUT_RATES = ("500mbit", "200mbit")  # after the revision: rates no model had seen
STAGES = (0, 1, 2)
BATCH = 64  # MNIST's global batch: micro-batch 32 at 2 x 1
SWEEP = OUT / "mnist-zero"
HELDOUT_SWEEP = OUT / "mnist-zero-heldout"
ENGINE_REFERENCE = OUT / f"mnist-coref-zero-b{BATCH // 2}"
SECTION = "## DeepSpeed's ZeRO stages 0-2: predicted before measuring, then measured"
REVISED_SECTION = "## DeepSpeed's ZeRO stages 0-2, the revised model: the same cases, and two held-out rates"

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def prediction(rate: str, stage: int, folder: str = "predictions") -> Path:
    return OUT / folder / f"{rate}-zero{stage}.json"


def references() -> list[Path]:
    """The reference at the global batch, and at the planned micro-batch (measured, not scaled)."""
    return [OUT / f"mnist-coref-b{b}" for b in (BATCH, BATCH // 2)]


@app.command()
def commbench(repeats: int = 5, rounds: int = 2, heldout: bool = False) -> None:
    for rate in HELDOUT_RATES if heldout else RATES:
        out = OUT / "commbench" / rate
        if not (out / "fit.json").exists():
            shutil.rmtree(out, ignore_errors=True)
            args = ["--backends", "deepspeed", *NODES, "--link-rate", rate, *PER_NODE, "--sizes", LOADED_SIZES]
            run(["run.py", "commbench", *args, "--repeats", str(repeats), "--rounds", str(rounds), "--out", str(out)])


@app.command()
def reference(repeats: int = 5) -> None:
    for out in references():
        if (out / "report.md").exists():
            continue
        batch = int(out.name.rsplit("-b", 1)[1])
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        with co_runner("mnist", batch, out):
            single_runs("mnist", batch, out, repeats, ("taskset", "-c", "0"))


def predict_every(rates: tuple[str, ...], folder: str, refs: list[Path]) -> None:
    for rate in rates:
        for stage in STAGES:
            path = prediction(rate, stage, folder)
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            plan = [*NODES, "--batch-size", str(BATCH), "--backends", "deepspeed", "--zero-stage", str(stage)]
            commbench = ["--commbench", str(OUT / "commbench" / rate)]
            run(["run.py", "project", *map(str, refs), *commbench, *plan, "--output", str(path)])


@app.command()
def predict() -> None:
    predict_every(RATES, "predictions", references())


@app.command("engine-reference")
def engine_reference(repeats: int = 5) -> None:
    """deepspeed x1 at each stage beside `single` x1, at the planned micro-batch, the other core computing."""
    out, batch = ENGINE_REFERENCE, BATCH // 2
    if (out / "report.md").exists():
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    stages = ["--zero-stage", ",".join(map(str, STAGES))]
    args = [*TASK_ARGS["mnist"], "--batch-size", str(batch), "--backends", "single,deepspeed", *stages]
    with co_runner("mnist", batch, out):
        run(
            [
                "run.py",
                "compare",
                *args,
                "--nprocs",
                "1",
                "--threads",
                "1",
                "--repeats",
                str(repeats),
                "--out",
                str(out),
            ],
            ("taskset", "-c", "0"),
        )


@app.command()
def revised() -> None:
    """The revised model (the engine's own time measured) for every case, and the held-out rates, before measuring."""
    commbench(heldout=True)
    predict_every((*RATES, *HELDOUT_RATES), "predictions-revised", [*references(), ENGINE_REFERENCE])


@app.command("measure-heldout")
def measure_heldout(repeats: int = 3) -> None:
    measure_sweep(HELDOUT_SWEEP, HELDOUT_RATES, "predictions-revised", repeats)


def measure_sweep(sweep: Path, rates: tuple[str, ...], folder: str, repeats: int) -> None:
    missing = [f"{r} ZeRO-{k}" for r in rates for k in STAGES if not prediction(r, k, folder).exists()]
    if missing:
        raise SystemExit(f"predict first (python -m benchmarks.zero_projection ...): {', '.join(missing)}")
    if (sweep / "report.md").exists():
        return
    shutil.rmtree(sweep, ignore_errors=True)
    stages = ["--zero-stage", ",".join(map(str, STAGES))]
    links = [*PER_NODE, "--link-rate", ",".join(rates)]
    args = [*TASK_ARGS["mnist"], "--backends", "deepspeed", *stages, *NODES, "--threads", "1", *links]
    run(["run.py", "compare", *args, "--repeats", str(repeats), "--out", str(sweep)])


@app.command()
def measure(repeats: int = 3) -> None:
    measure_sweep(SWEEP, RATES, "predictions", repeats)


def rows(rates: tuple[str, ...] = RATES, folder: str = "predictions") -> list[dict]:
    from distbench.sweep import grouping

    got: dict[tuple, list[float]] = {}
    sweeps = [s for s in (SWEEP, HELDOUT_SWEEP) if (s / "results.jsonl").exists()]
    for r in grouping.load(sweeps).records:
        if r["status"] == "ok" and r["backend"] == "deepspeed":
            got.setdefault((r["link_rate"], r["config"]["zero_stage"]), []).append(r["samples_per_sec"])
    out = []
    for rate in rates:
        for stage in STAGES:
            (p,) = json.loads(prediction(rate, stage, folder).read_text())
            runs = got.get((rate, stage), [])
            m = statistics.median(runs) if runs else None
            err = (p["samples_per_sec"] - m) / m if m else None
            out.append({"rate": rate, "stage": stage, "p": p, "runs": runs, "measured": m, "error": err})
    return out


FIRST_SOURCE = (
    "the predictions in docs/results/projection/zero/predictions/ (written by `... predict` before `... measure` ran "
    "the sweep), and the sweep in docs/results/projection/zero/mnist-zero"
)
REVISED_SOURCE = (
    "the predictions in docs/results/projection/zero/predictions-revised/ (written by `... revised` after the table "
    "above, from the same inputs and deepspeed x1 runs at each stage, mnist-coref-zero-b32; for the held-out rates "
    "before `... measure-heldout` ran them), and the sweeps in docs/results/projection/zero/mnist-zero and "
    "mnist-zero-heldout"
)


@app.command()
def table(out: Path = ROOT / "docs" / "projection.md") -> None:
    write_table(out, SECTION, rows(), FIRST_SOURCE)
    if prediction(HELDOUT_RATES[-1], STAGES[-1], "predictions-revised").exists():
        data = rows((*RATES, *HELDOUT_RATES), "predictions-revised")
        heldout = [abs(r["error"]) for r in data if r["error"] is not None and r["rate"] in HELDOUT_RATES]
        write_table(out, REVISED_SECTION, data, REVISED_SOURCE, heldout)


def write_table(out: Path, section: str, data: list[dict], source: str, heldout: list[float] = ()) -> None:
    errors = [abs(r["error"]) for r in data if r["error"] is not None]
    lines = [
        section,
        "",
        f"Produced by `python -m benchmarks.zero_projection table` on {machine()}, from {source}, measured on "
        f"{recorded_machine_of()}. MNIST, global batch {BATCH}, 2 simulated nodes x 1 process on per-node links. "
        "Error = (predicted - measured) / measured, measured = the median samples/s over the rounds (min-max beside "
        "it).",
        "",
        _summary(errors, f"{len(errors)} cases") if errors else "No measured case yet.",
        *(["", _summary(list(heldout), f"The held-out rates alone ({len(heldout)} cases)")] if heldout else []),
        "",
        "| link | ZeRO stage | predicted samples/s (interval) | measured (min-max, runs) | error |",
        "|---|---|---|---|---|",
    ]
    for r in data:
        p = r["p"]
        m = f"{r['measured']:.1f} ({min(r['runs']):.1f}-{max(r['runs']):.1f}, {len(r['runs'])})" if r["runs"] else "—"
        e = f"{100 * r['error']:+.1f} %" if r["error"] is not None else "—"
        lo, hi = p["samples_per_sec_lo"], p["samples_per_sec_hi"]
        interval = f" ({lo:.1f}-{hi:.1f})" if lo is not None else ""
        lines.append(f"| {r['rate']} | {r['stage']} | {p['samples_per_sec']:.1f}{interval} | {m} | {e} |")
    write_section(out, section, lines + [""])
    print("\n".join(lines))


def recorded_machine_of() -> str:
    from benchmarks.projection import Sweep

    return recorded_machine((Sweep(SWEEP.name, (), RATES),), SWEEP.parent)


if __name__ == "__main__":
    app()
