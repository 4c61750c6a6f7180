"""The projection of DeepSpeed's ZeRO stages validated (docs/projection.md): predict, then measure, then compare.

    python -m benchmarks.zero_projection commbench   # DeepSpeed's all-reduce (deepspeed.comm) on per-node links
    python -m benchmarks.zero_projection reference   # MNIST `single` x1 runs, the other core computing (as a node's)
    python -m benchmarks.zero_projection predict     # `run.py project --zero-stage K` for every case, nothing measured
    python -m benchmarks.zero_projection measure     # the same cases with `run.py compare` (refused before predict)
    python -m benchmarks.zero_projection table       # predicted against measured, into docs/projection.md

A revision of the model (DeepSpeed's engine's own time per step, measured at x1) was validated by the commands
`engine-reference`, `revised` and `measure-heldout` of this script at commit 4eb85a7, and taken out again: its table
and what it found stay in docs/projection.md, its inputs and sweeps in docs/results/projection/zero/.

`--results DIR` (before the command) keeps a validation of its own: the first model's in docs/results/projection/zero
(the default), the model with commbench's all-gather and the norm's all-reduce (2026-12-04) in .../zero-gather, the
engine measured on one node (2026-12-05, `project --node-sweep --node-commbench`) in .../zero-engine, whose inputs
`engine` adds; ZeRO-3's (stages 0 and 3, the engine measured the same way) in .../zero3:

    python -m benchmarks.zero_projection --results docs/results/projection/zero-gather commbench   # and so on
    python -m benchmarks.zero_projection --results docs/results/projection/zero-engine engine      # before predict

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
    case_cells,
    cases_summary,
    co_runner,
    recorded_machine,
    run,
    single_runs,
)

FIRST = ROOT / "docs" / "results" / "projection" / "zero"
OUT = FIRST  # the validation's folder: --results
RATES = ("none", "1gbit", "100mbit")
STAGES = (0, 1, 2)  # the stages validated in a folder; ZeRO-3's (zero3): STAGES3
STAGES3 = (0, 3)
ALL_STAGES = (0, 1, 2, 3)  # zero-node: stage 0's own step measured on one node too
BATCH = 64  # MNIST's global batch: micro-batch 32 at 2 x 1


def stages() -> tuple[int, ...]:
    """The ZeRO stages this validation's folder holds."""
    return {"zero3": STAGES3, "zero-node": ALL_STAGES, "zero-loaded": ALL_STAGES}.get(OUT.name, STAGES)


SECTIONS = {  # docs/projection.md's section of each validation, by its folder's name
    "zero": "## DeepSpeed's ZeRO stages 0-2: predicted before measuring, then measured",
    "zero-gather": "## DeepSpeed's ZeRO stages 0-2 with commbench's all-gather and the norm: predicted, then measured",
    "zero-engine": "## DeepSpeed's ZeRO stages 0-2 with the engine measured on one node: predicted, then measured",
    "zero3": "## DeepSpeed's ZeRO-3 with the engine measured on one node: predicted, then measured",
    "zero-node": "## DeepSpeed's ZeRO stages 0-3, stage 0 measured on one node too: predicted, then measured",
    "zero-loaded": "## DeepSpeed's ZeRO stages 0-3, its collectives timed under load: predicted, then measured",
}

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def results(folder: Path = typer.Option(FIRST, "--results", help="the validation's folder")) -> None:
    global OUT
    OUT = folder if folder.is_absolute() else ROOT / folder


def sweep() -> Path:
    return OUT / "mnist-zero"


def sweeps() -> list[Path]:
    """The sweep, and any measured again (`measure --again`: mnist-zero-2, -3, ...), in order."""
    again = sorted(OUT.glob("mnist-zero-[0-9]*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))
    return [sweep(), *again]


def section() -> str:
    return SECTIONS[OUT.name]


def prediction(rate: str, stage: int) -> Path:
    return OUT / "predictions" / f"{rate}-zero{stage}.json"


def references() -> list[Path]:
    """The reference at the global batch, and at the planned micro-batch (measured, not scaled)."""
    return [OUT / f"mnist-coref-b{b}" for b in (BATCH, BATCH // 2)]


@app.command()
def commbench(repeats: int = 5, rounds: int = 2) -> None:
    for rate in RATES:
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


def engine_dir() -> Path:
    return OUT / "mnist-engine"


def node_commbench() -> Path:
    return OUT / "commbench" / "node"


@app.command()
def engine(repeats: int = 5, rounds: int = 2) -> None:
    """The engine's inputs (`project --node-sweep --node-commbench`): deepspeed at stages 0-2 on one node at 2
    processes, the stages alternating within each round, and commbench of deepspeed's collectives on that node."""
    if not (node_commbench() / "fit.json").exists():
        shutil.rmtree(node_commbench(), ignore_errors=True)
        args = ["--backends", "deepspeed", "--nodes", "1", "--nprocs", "2", "--sizes", LOADED_SIZES]
        run(
            [
                "run.py",
                "commbench",
                *args,
                "--repeats",
                str(repeats),
                "--rounds",
                str(rounds),
                "--out",
                str(node_commbench()),
            ]
        )
    if not (engine_dir() / "report.md").exists():
        shutil.rmtree(engine_dir(), ignore_errors=True)
        zero = ["--zero-stage", ",".join(map(str, stages()))]
        args = [*TASK_ARGS["mnist"], "--backends", "deepspeed", *zero, "--nodes", "1", "--nprocs", "2"]
        run(["run.py", "compare", *args, "--threads", "1", "--repeats", str(repeats), "--out", str(engine_dir())])


@app.command()
def predict() -> None:
    """Each case's prediction; where `engine` measured the engine (this validation's folder has it), from it."""
    measured = (engine_dir() / "report.md").exists()
    for rate in RATES:
        for stage in stages():
            path = prediction(rate, stage)
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            plan = [*NODES, "--batch-size", str(BATCH), "--backends", "deepspeed", "--zero-stage", str(stage)]
            commbench = ["--commbench", str(OUT / "commbench" / rate)]
            if measured:  # every stage since stage 0's step is measured there too (zero-engine, zero3: 1-3 only)
                commbench += ["--node-sweep", str(engine_dir()), "--node-commbench", str(node_commbench())]
            run(["run.py", "project", *map(str, references()), *commbench, *plan, "--output", str(path)])


@app.command()
def measure(repeats: int = 3, again: bool = False) -> None:
    """The sweep (refused before the predictions); with --again, one more into the next mnist-zero-N, the same
    predictions against more rounds at another time (the table takes every sweep)."""
    missing = [f"{r} ZeRO-{k}" for r in RATES for k in stages() if not prediction(r, k).exists()]
    if missing:
        raise SystemExit(f"predict first (python -m benchmarks.zero_projection predict): {', '.join(missing)}")
    out = OUT / f"mnist-zero-{len(sweeps()) + 1}" if again else sweep()
    if (out / "report.md").exists():
        return
    shutil.rmtree(out, ignore_errors=True)
    zero = ["--zero-stage", ",".join(map(str, stages()))]
    links = [*PER_NODE, "--link-rate", ",".join(RATES)]
    args = [*TASK_ARGS["mnist"], "--backends", "deepspeed", *zero, *NODES, "--threads", "1", *links]
    run(["run.py", "compare", *args, "--repeats", str(repeats), "--out", str(out)])


def rows() -> list[dict]:
    from distbench.sweep import grouping

    got: dict[tuple, list[float]] = {}
    for r in grouping.load(sweeps()).records:
        if r["status"] == "ok" and r["backend"] == "deepspeed":
            got.setdefault((r["link_rate"], r["config"]["zero_stage"]), []).append(r["samples_per_sec"])
    out = []
    for rate in RATES:
        for stage in stages():
            (p,) = json.loads(prediction(rate, stage).read_text())
            runs = got.get((rate, stage), [])
            m = statistics.median(runs) if runs else None
            err = (p["samples_per_sec"] - m) / m if m else None
            out.append({"rate": rate, "stage": stage, "p": p, "runs": runs, "measured": m, "error": err})
    return out


def paired_rows(data: list[dict]) -> list[dict]:
    """Each stage above 0 against stage 0 at the same rate: the predicted ratio of samples/s, and the measured one
    paired within each round (the runs of a round are minutes apart, the rounds further: the machine's drift between
    rounds cancels out of a ratio within one)."""
    from distbench.sweep import grouping

    by_round: dict[tuple, float] = {}
    for n, folder in enumerate(sweeps()):
        for r in grouping.load([folder]).records:
            if r["status"] == "ok" and r["backend"] == "deepspeed":
                by_round[(r["link_rate"], r["config"]["zero_stage"], (n, r["round"]))] = r["samples_per_sec"]
    predicted = {(d["rate"], d["stage"]): d["p"]["samples_per_sec"] for d in data}
    out = []
    for rate in RATES:
        for stage in stages()[1:]:
            rounds = sorted({k[2] for k in by_round if k[:2] == (rate, stage)})
            ratios = [by_round[(rate, stage, n)] / by_round[(rate, 0, n)] for n in rounds if (rate, 0, n) in by_round]
            p = predicted[(rate, stage)] / predicted[(rate, 0)]
            m = statistics.median(ratios) if ratios else None
            out.append({"rate": rate, "stage": stage, "p": p, "ratios": ratios, "measured": m})
    return out


def paired_lines(data: list[dict]) -> list[dict]:
    rows = paired_rows(data)
    lines = [
        "",
        f"Stage{'s' if len(stages()) > 2 else ''} {' and '.join(map(str, stages()[1:]))} against stage 0 at the same "
        "link, samples/s over samples/s: predicted, and measured within "
        "each round (median, and each round's); the error is the predicted ratio's against the measured median.",
        "",
        "| link | ZeRO stage | predicted / stage 0 | measured / stage 0 (rounds) | error |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        each = ", ".join(f"{x:.3f}" for x in r["ratios"])
        e = f"{100 * (r['p'] - r['measured']) / r['measured']:+.1f} %" if r["measured"] else "—"
        m = f"{r['measured']:.3f} ({each})" if r["measured"] else "—"
        lines.append(f"| {r['rate']} | {r['stage']} | {r['p']:.3f} | {m} | {e} |")
    return lines


@app.command()
def table(out: Path = ROOT / "docs" / "projection.md") -> None:
    data = rows()
    folder = OUT.relative_to(ROOT)
    source = (
        f"the predictions in {folder}/predictions/ (written by `... predict` before `... measure` ran the sweep), and "
        f"the sweep{'s' if len(sweeps()) > 1 else ''} in {', '.join(f'{folder}/{s.name}' for s in sweeps())}"
    )
    results = "" if OUT == FIRST else f" --results {folder}"
    lines = [
        section(),
        "",
        f"Produced by `python -m benchmarks.zero_projection{results} table` on {machine()}, from {source}, measured on "
        f"{recorded_machine_of()}. MNIST, global batch {BATCH}, 2 simulated nodes x 1 process on per-node links. "
        "Error = (predicted - measured) / measured, measured = the median samples/s over the rounds (min-max beside "
        "it).",
        "",
        cases_summary(data),
        "",
        "| link | ZeRO stage | predicted samples/s (interval) | measured (min-max, runs) | error |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r['rate']} | {r['stage']} | {case_cells(r)} |" for r in data]
    if OUT != FIRST:  # the first validation's section stays as it was written
        lines += paired_lines(data)
    write_section(out, section(), lines + [""])
    print("\n".join(lines))


def recorded_machine_of() -> str:
    from benchmarks.projection import Sweep

    return recorded_machine(tuple(Sweep(s.name, (), RATES) for s in sweeps()), OUT)


if __name__ == "__main__":
    app()
