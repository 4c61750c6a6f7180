"""The projection's validation (docs/projection.md): predict, then measure, then compare.

    python -m benchmarks.projection commbench   # each library's all-reduce on per-node links at every rate
    python -m benchmarks.projection reference   # each task's `single` x1 runs (the computation)
    python -m benchmarks.projection predict     # `run.py project` for every case, before anything is measured
    python -m benchmarks.projection measure     # the same cases with `run.py compare`
    python -m benchmarks.projection table       # predicted against measured, into docs/projection.md

and then, the model revised after that table (a measured micro-batch instead of a scaled one, docs/projection.md):

    python -m benchmarks.projection micro-reference  # `single` x1 runs at each planned micro-batch
    python -m benchmarks.projection revised          # every case again, and the held-out sweep, before it is measured
    python -m benchmarks.projection measure          # the held-out sweep (the others are measured already)
    python -m benchmarks.projection table            # both tables

and the third model (what an all-reduce takes from a computing core, each compression timed, the slowest rank), on
another machine than the first two, so that every case is measured again there:

    python -m benchmarks.projection commbench-load   # commbench under load, uncompressed and fp16, every rate
    python -m benchmarks.projection co-reference     # `single` x1 runs with the other core computing, as a node's is
    python -m benchmarks.projection loaded           # every case and two held-out sweeps, before any is measured
    python -m benchmarks.projection measure-third    # all of them, into docs/results/projection/third/
    python -m benchmarks.projection table --models third
    python -m benchmarks.projection commbench-doc --which loaded

Everything goes under docs/results/projection/ (commbench/RATE, TASK-reference, predictions/, TASK-SWEEP); each step
is the commands a user types (`run.py commbench`, `compare`, `project`), so the validation is of the tool as used.
Two simulated nodes x 1 process, one thread each, each node on its own core, per-node links (netns.py). The cases
are `CASES`, in one place.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env, machine, write_section
from distbench.records import write_json

OUT = ROOT / "docs" / "results" / "projection"
RATES = ("none", "1gbit", "500mbit", "200mbit", "100mbit")
BACKENDS = "ddp,accelerate,horovod"
# the validation's scale and link, the same for commbench, the predictions and the measured sweeps
NODES = ["--nodes", "2", "--nprocs", "1"]
PER_NODE = ["--link-mode", "per-node"]
SECTION = "## Validation: predicted before measuring, then measured"
BERT_DATA = str(ROOT.parent / "shared" / "data" / "rt-polarity")


@dataclass(frozen=True)
class Sweep:
    """One compare sweep of the validation: a task at some rates and knobs, and the rounds it gets."""

    name: str
    task_args: tuple[str, ...]
    rates: tuple[str, ...]
    accumulate: tuple[int, ...] = (1,)
    compression: tuple[str, ...] = ("none",)
    repeats: int = 5

    @property
    def task(self) -> str:
        return self.name.split("-")[0]

    def cases(self) -> list[tuple[str, int, str]]:
        return [(r, a, c) for r in self.rates for a in self.accumulate for c in self.compression]


TASK_ARGS = {
    "mnist": ("--task", "mnist", "--max-steps", "60"),
    "resnet18": ("--task", "synthetic-resnet", "--model", "resnet18", "--max-steps", "12"),
    "bert": ("--task", "bert-sentiment", "--data-dir", BERT_DATA, "--max-steps", "12"),
}
# the micro-batches of CASES (and HELDOUT's global batch) that `micro-reference` runs, `single` x1, per task
MICRO_BATCHES = {"mnist": (32, 8, 128), "resnet18": (16,), "bert": (16,)}
REVISED = OUT / "predictions-revised"
REVISED_SECTION = "## Validation of the revised model: the same cases, and a held-out sweep predicted before measuring"
CASES = (
    Sweep("mnist-links", TASK_ARGS["mnist"], RATES),
    Sweep("mnist-knobs", TASK_ARGS["mnist"], ("none", "100mbit"), (1, 4), ("none", "fp16"), repeats=3),
    Sweep("resnet18-links", TASK_ARGS["resnet18"], ("none", "100mbit"), repeats=3),
    Sweep("bert-links", TASK_ARGS["bert"], ("none", "1gbit"), repeats=3),
)
# after the revision: a global batch no case had (128: micro-batch 64 at x2)
HELDOUT = Sweep("mnist-b128", (*TASK_ARGS["mnist"], "--batch-size", "128"), ("none", "1gbit", "200mbit"), repeats=3)
# after the third model (commbench under load, each compression timed, the slowest rank): sweeps no model has seen,
# in the CPU-bound regime where the first two failed (MNIST at a new batch, 96: micro-batch 48) and BERT at a new rate,
# with and without fp16
LOADED = OUT / "predictions-loaded"
LOADED_SECTION = (
    "## Validation of the third model: commbench under load, compression timed, the slowest rank; held-out sweeps "
    "predicted before measuring"
)
HELDOUT_LOADED = (
    Sweep(
        "mnist-b96",
        (*TASK_ARGS["mnist"], "--batch-size", "96"),
        ("none", "1gbit", "500mbit"),
        compression=("none", "fp16"),
        repeats=3,
    ),
    Sweep("bert-500mbit", TASK_ARGS["bert"], ("500mbit",), compression=("none", "fp16"), repeats=3),
)
# The third model's references and commbench ran on another machine than the first two models' sweeps (the same
# kind of 2-core VM, another kernel build): its validation measures every case again here, 3 rounds each, into THIRD
THIRD = OUT / "third"
THIRD_SWEEPS = (*HELDOUT_LOADED, *(replace(s, repeats=3) for s in CASES))  # the held-out first


def _cell(f: dict, key: str, scale: float, spec: str = ".3f") -> str:
    """A fit.json value scaled for the table; null (a fit commbench found not physical) says so."""
    return "not physical" if f.get(key) is None else format(f[key] * scale, spec)


def batch_of(sweep: Sweep) -> int:
    args = list(sweep.task_args)
    return int(args[args.index("--batch-size") + 1]) if "--batch-size" in args else DEFAULT_BATCH[sweep.task]


DEFAULT_BATCH = {"mnist": 64, "resnet18": 32, "bert": 32}


def reference_dirs(task: str) -> list[Path]:
    return [OUT / f"{task}-reference", *(OUT / f"{task}-reference-b{b}" for b in MICRO_BATCHES[task])]


def run(args: list[str], prefix: tuple[str, ...] = ()) -> None:
    print("+ " + " ".join([*prefix, "python", *args]), file=sys.stderr, flush=True)
    subprocess.run([*prefix, sys.executable, *args], cwd=ROOT, env=child_env(), check=True)


def single_runs(task: str, batch: int, out: Path, repeats: int, prefix: tuple[str, ...] = ()) -> None:
    """The task's `single` x1 runs at `batch`, one thread (MNIST `repeats` rounds, the long tasks 3)."""
    rounds = repeats if task == "mnist" else 3
    args = [*TASK_ARGS[task], "--batch-size", str(batch), "--backends", "single", "--nprocs", "1", "--threads", "1"]
    run(["run.py", "compare", *args, "--repeats", str(rounds), "--out", str(out)], prefix)


def prediction_path(sweep: Sweep, rate: str, acc: int, comp: str, folder: Path | None = None) -> Path:
    """Where a model's prediction of a case is: the first model's by task (folder None), the later ones' by sweep."""
    if folder is not None:
        return folder / f"{sweep.name}-{rate}-acc{acc}-{comp}.json"
    return OUT / "predictions" / f"{sweep.task}-{rate}-acc{acc}-{comp}.json"


def predicted(sweep: Sweep, folder: Path) -> bool:
    return all(prediction_path(sweep, *case, folder).exists() for case in sweep.cases())


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def commbench_every_rate(root: Path, repeats: int, rounds: int, extra: tuple[str, ...] = ()) -> None:
    """`run.py commbench` of every library at each rate into root/RATE (skipping those done, redoing one cut short)."""
    for rate in RATES:
        out = root / rate
        if not (out / "fit.json").exists():
            shutil.rmtree(out, ignore_errors=True)
            run(
                [
                    "run.py",
                    "commbench",
                    "--backends",
                    BACKENDS,
                    *NODES,
                    "--link-rate",
                    rate,
                    *PER_NODE,
                    *extra,
                    "--repeats",
                    str(repeats),
                    "--rounds",
                    str(rounds),
                    "--out",
                    str(out),
                ]
            )


@app.command()
def commbench(repeats: int = 10, rounds: int = 2) -> None:
    commbench_every_rate(OUT / "commbench", repeats, rounds)


# the third model (docs/projection.md): commbench under load and with each library's 16-bit compression timed, up to
# 16 MiB (the validation's buckets and fusions are linear beyond it), fewer repeats than the first: 3 times as long each
LOADED_COMMBENCH = OUT / "commbench-load"
LOADED_SIZES = ",".join(str(4096 * 4**i) for i in range(7))


@app.command("commbench-load")
def commbench_load(repeats: int = 5, rounds: int = 2) -> None:
    commbench_every_rate(
        LOADED_COMMBENCH, repeats, rounds, ("--grad-compression", "none,fp16", "--sizes", LOADED_SIZES)
    )


@app.command()
def reference(repeats: int = 5) -> None:
    for task, args in TASK_ARGS.items():
        out = OUT / f"{task}-reference"
        if not (out / "report.md").exists():
            run(
                [
                    "run.py",
                    "compare",
                    *args,
                    "--backends",
                    "single",
                    "--nprocs",
                    "1",
                    "--threads",
                    "1",
                    "--repeats",
                    str(repeats),
                    "--out",
                    str(out),
                ]
            )


@app.command()
def predict() -> None:
    for sweep in CASES:
        for rate, acc, comp in sweep.cases():
            path = prediction_path(sweep, rate, acc, comp)
            if not path.exists():
                run(
                    [
                        "run.py",
                        "project",
                        str(OUT / f"{sweep.task}-reference"),
                        "--commbench",
                        str(OUT / "commbench" / rate),
                        *NODES,
                        "--accumulate",
                        str(acc),
                        "--grad-compression",
                        comp,
                        "--output",
                        str(path),
                    ]
                )


def measure_sweep(sweep: Sweep, root: Path = OUT) -> None:
    out = root / sweep.name
    if (out / "report.md").exists():
        return
    shutil.rmtree(out, ignore_errors=True)  # an interrupted one
    run(
        [
            "run.py",
            "compare",
            *sweep.task_args,
            "--backends",
            BACKENDS,
            *NODES,
            "--threads",
            "1",
            *PER_NODE,
            "--link-rate",
            ",".join(sweep.rates),
            "--accumulate",
            ",".join(map(str, sweep.accumulate)),
            "--grad-compression",
            ",".join(sweep.compression),
            "--repeats",
            str(sweep.repeats),
            "--out",
            str(out),
        ]
    )


@app.command()
def measure() -> None:
    """The first two models' sweeps (a held-out sweep only once its model predicted it)."""
    for sweep in (*CASES, *((HELDOUT,) if predicted(HELDOUT, REVISED) else ())):
        measure_sweep(sweep)


@app.command("measure-third")
def measure_third() -> None:
    """The third model's sweeps, on the machine its references and commbench ran on, once it predicted them all."""
    missing = [s.name for s in THIRD_SWEEPS if not predicted(s, LOADED)]
    if missing:
        raise SystemExit(f"predict first (python -m benchmarks.projection loaded): {', '.join(missing)}")
    for sweep in THIRD_SWEEPS:
        measure_sweep(sweep, THIRD)


def measured(sweep: Sweep, root: Path = OUT) -> dict[tuple, list[float]]:
    """samples/s of every ok run of the sweep, by (backend, rate, accumulate, compression)."""
    from distbench.sweep import grouping

    out: dict[tuple, list[float]] = {}
    for r in grouping.load([root / sweep.name]).records:
        if r["status"] == "ok":
            key = (r["backend"], r["link_rate"], r["accumulate"], r["grad_compression"])
            out.setdefault(key, []).append(r["samples_per_sec"])
    return out


def rows(sweeps: tuple[Sweep, ...] = CASES, folder: Path | None = None, root: Path = OUT) -> list[dict]:
    """Every case: predicted and measured samples/s, and the error of the prediction."""
    out = []
    for sweep in sweeps:
        got = measured(sweep, root)
        for rate, acc, comp in sweep.cases():
            for p in json.loads(prediction_path(sweep, rate, acc, comp, folder).read_text()):
                runs = got.get((p["backend"], rate, acc, comp), [])
                m = statistics.median(runs) if runs else None
                err = (p["samples_per_sec"] - m) / m if m else None
                out.append(
                    {
                        "task": sweep.task,
                        "sweep": sweep.name,
                        "batch": batch_of(sweep),
                        "rate": rate,
                        "accumulate": acc,
                        "compression": comp,
                        "backend": p["backend"],
                        "predicted": p["samples_per_sec"],
                        "lo": p["samples_per_sec_lo"],
                        "hi": p["samples_per_sec_hi"],
                        "measured": m,
                        "runs": len(runs),
                        "min": min(runs, default=None),
                        "max": max(runs, default=None),
                        "error": err,
                    }
                )
    return out


FIRST_SOURCE = (
    "from the predictions in docs/results/projection/predictions/ (written by `... predict` before `... measure` ran "
    "the sweeps)"
)
REVISED_SOURCE = (
    "from the predictions in docs/results/projection/predictions-revised/ (written by `... revised` after the table "
    "above; for the held-out sweep, batch 128, before `... measure` ran it)"
)


LOADED_SOURCE = (
    "from the predictions in docs/results/projection/predictions-loaded/ (written by `... loaded` after both tables "
    "above, from `... commbench-load` and `... co-reference`, before `... measure-third` ran any of these sweeps; "
    "the held-out sweeps, MNIST at batch 96 and BERT at 500 Mbit/s, no model had seen)"
)


def recorded_machine(sweeps: tuple[Sweep, ...], root: Path) -> str:
    """The machine and the day the sweeps were measured on, from their records (a table written later, elsewhere,
    still says where its measurements come from)."""
    from distbench.sweep import grouping

    recs = [r for s in sweeps for r in grouping.load([root / s.name]).records]
    platforms = sorted({r["environment"]["platform"] for r in recs})
    days = sorted({r["started_at"][:10] for r in recs})
    cores = sorted({str(r["environment"]["cpu_count"]) for r in recs})
    when = " to ".join(dict.fromkeys([days[0], days[-1]]))
    return f"{when}: {'/'.join(cores)} cores, {', '.join(platforms)}, CPU only (gloo)"


def cases_summary(data: list[dict]) -> str:
    """A validation table's bold line: its cases' median and largest absolute error (or that none was measured)."""
    errors = [abs(r["error"]) for r in data if r["error"] is not None]
    return _summary(errors, f"{len(errors)} cases") if errors else "No measured case yet."


def case_cells(r: dict) -> str:
    """One validation case's last three cells: predicted samples/s (interval), measured (min-max, runs; failed ones),
    error; `r` holds the prediction `p`, the measured `runs`, their median `measured`, the `error` (and `failed`)."""
    p = r["p"]
    m = f"{r['measured']:.1f} ({min(r['runs']):.1f}-{max(r['runs']):.1f}, {len(r['runs'])})" if r["runs"] else "—"
    if r.get("failed"):
        m += f", {r['failed']} failed"
    e = f"{100 * r['error']:+.1f} %" if r["error"] is not None else "—"
    lo, hi = p.get("samples_per_sec_lo"), p.get("samples_per_sec_hi")
    interval = f" ({lo:.1f}-{hi:.1f})" if lo is not None else ""
    return f"{p['samples_per_sec']:.1f}{interval} | {m} | {e}"


def _summary(errors: list[float], what: str) -> str:
    return (
        f"**{what}: median absolute error {100 * statistics.median(errors):.1f} %, largest {100 * max(errors):.1f} "
        f"%; {sum(e <= 0.2 for e in errors)} within 20 %, {sum(e <= 0.1 for e in errors)} within 10 %.**"
    )


def table_lines(
    data: list[dict],
    section: str = SECTION,
    source: str = FIRST_SOURCE,
    heldout_sweeps: tuple[Sweep, ...] = (),
    sweeps: str = "docs/results/projection/",
    measured_on: str = "",
) -> list[str]:
    errors = [abs(r["error"]) for r in data if r["error"] is not None]
    names = {s.name for s in heldout_sweeps}
    heldout = [abs(r["error"]) for r in data if r["error"] is not None and r["sweep"] in names]
    lines = [
        section,
        "",
        f"Produced by `python -m benchmarks.projection table` on {machine()}, {source}, and the sweeps in "
        f"{sweeps}, measured on {measured_on}. Error = (predicted - measured) / measured, measured = the median "
        "samples/s over the rounds (min-max beside it).",
        "",
        _summary(errors, f"{len(errors)} cases") if errors else "No measured case yet.",
        *(
            [
                "",
                _summary(
                    heldout, f"The held-out {'sweeps' if len(names) > 1 else 'sweep'} alone ({len(heldout)} cases)"
                ),
            ]
            if heldout
            else []
        ),
        "",
        "| task | batch | link | acc | compression | backend | predicted samples/s (interval) | measured "
        "(min-max, runs) | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data:
        m = f"{r['measured']:.1f} ({r['min']:.1f}-{r['max']:.1f}, {r['runs']})" if r["measured"] else "—"
        e = f"{100 * r['error']:+.1f} %" if r["error"] is not None else "—"
        lines.append(
            f"| {r['task']} | {r['batch']} | {r['rate']} | {r['accumulate']} | {r['compression']} | {r['backend']} | "
            f"{r['predicted']:.1f} ({r['lo']:.1f}-{r['hi']:.1f}) | {m} | {e} |"
        )
    return lines + [""]


COMMBENCH_SECTION = "## Measured: busbw against message size on per-node links"


def commbench_lines(rates: tuple[str, ...] = RATES) -> list[str]:
    """busbw per library and size at each rate, the fits, and how close the largest message came to the link."""
    from distbench.launching import link
    from distbench.planning import commbench_report as cb
    from distbench.planning.bandwidth import size_text

    lines = [
        COMMBENCH_SECTION,
        "",
        f"Produced by `python -m benchmarks.projection commbench` (each rate: `run.py commbench --backends {BACKENDS} "
        f"{' '.join(NODES)} --link-rate RATE {' '.join(PER_NODE)} --repeats 10 --rounds 2 --out "
        f"docs/results/projection/commbench/RATE`) on {machine()}; this section by `python -m benchmarks.projection "
        "commbench-doc`. Medians over 20 repeats (10 per launch, 2 launches alternating the order); MB/s are 10^6 "
        "bytes/s. The plots: docs/results/projection/commbench/RATE/busbw.png.",
        "",
    ]
    fits_rows, limit_rows = [], []
    for rate in rates:
        out = OUT / "commbench" / rate
        rows = cb.summarize([json.loads(line) for line in (out / cb.RECORDS).read_text().splitlines()])
        fitted = json.loads((out / cb.FIT).read_text())
        names = sorted({r["backend"] for r in rows})
        sizes = sorted({r["size_bytes"] for r in rows})
        by = {(r["backend"], r["size_bytes"]): r for r in rows}
        lines += [
            f"### {rate if rate != 'none' else 'unshaped'}",
            "",
            f"![busbw at {rate}](results/projection/commbench/{rate}/busbw.png)",
            "",
            "| size | " + " | ".join(f"{b} busbw MB/s (CPU ms)" for b in names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for size in sizes:
            cells = [f"{by[b, size]['busbw_Bps'] / 1e6:.1f} ({by[b, size]['cpu_s'] * 1e3:.2f})" for b in names]
            lines.append(f"| {size_text(size)} | " + " | ".join(cells) + " |")
        lines.append("")
        bits = link.parse_rate(rate)
        for b in names:
            f = fitted[b]
            fits_rows.append(
                f"| {rate} | {b} | {_cell(f, 'alpha_s', 1e3)} | {_cell(f, 'bus_bandwidth_Bps', 1e-6, '.1f')} | "
                f"{_cell(f, 'cpu_alpha_s', 1e3)} | {_cell(f, 'cpu_beta_s_per_byte', 1e9)} |"
            )
            if bits:
                top = by[b, sizes[-1]]["busbw_Bps"]
                limit_rows.append(f"| {rate} | {b} | {bits / 8e6:.1f} | {top / 1e6:.1f} | {top / (bits / 8):.2f} |")
    lines += [
        "### Fitted latency and bandwidth",
        "",
        "| link | backend | alpha ms | bus bandwidth MB/s (2(n-1)/(n beta)) | CPU alpha ms | CPU beta ns/B |",
        "|---|---|---|---|---|---|",
        *fits_rows,
        "",
        f"### The largest message ({size_text(sizes[-1])}) against the link",
        "",
        "| link | backend | link MB/s | busbw MB/s | busbw / link |",
        "|---|---|---|---|---|",
        *limit_rows,
        "",
    ]
    return lines


# the third model's computation: each reference run on one core while the same task at the same batch computes on
# the other, as the other simulated node does in every measured case (two independent runs went at 0.90 of twice one
# alone here, docs/performance.md); the first two models' references ran with the other core idle
CO_BATCHES = {"mnist": (64, 32, 8, 48), "resnet18": (32, 16), "bert": (32, 16)}


def co_reference_dirs(task: str) -> list[Path]:
    return [OUT / f"{task}-coref-b{b}" for b in CO_BATCHES[task]]


@contextlib.contextmanager
def co_runner(task: str, batch: int, out: Path):
    """The other node's computation, pinned to core 1 (the reference runs on core 0) until the block ends."""
    args = list(TASK_ARGS[task][:-2])  # its own --max-steps below
    assert TASK_ARGS[task][-2] == "--max-steps"
    command = [*args, "--batch-size", str(batch), "--max-steps", "1000000", "--epochs", "1000", "--threads", "1"]
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            "1",
            sys.executable,
            "run.py",
            "--backend",
            "single",
            *command,
            "--no-progress",
            "--output",
            str(out / "co-runner.jsonl"),
        ],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(CO_RUNNER_STARTUP_S)
    try:
        if proc.poll() is not None:
            raise RuntimeError(f"the co-runner of {task} at batch {batch} ended early ({proc.returncode})")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


CO_RUNNER_STARTUP_S = 15  # its imports and model built: it computes from then on


@app.command("co-reference")
def co_reference(repeats: int = 5) -> None:
    for task, batches in CO_BATCHES.items():
        for b in batches:
            out = OUT / f"{task}-coref-b{b}"
            if (out / "report.md").exists():
                continue
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            with co_runner(task, b, out):
                single_runs(task, b, out, repeats, ("taskset", "-c", "0"))


@app.command("micro-reference")
def micro_reference(repeats: int = 5) -> None:
    for task, batches in MICRO_BATCHES.items():
        for b in batches:
            out = OUT / f"{task}-reference-b{b}"
            if not (out / "report.md").exists():
                single_runs(task, b, out, repeats)


def predict_every(sweeps: tuple[Sweep, ...], folder: Path, commbench_root: Path, references=reference_dirs) -> None:
    """`run.py project` for every case of `sweeps` not yet predicted into `folder`, the micro-batches measured."""
    folder.mkdir(parents=True, exist_ok=True)
    for sweep in sweeps:
        for rate, acc, comp in sweep.cases():
            path = prediction_path(sweep, rate, acc, comp, folder)
            if not path.exists():
                refs = [str(d) for d in references(sweep.task)]
                plan = [*NODES, "--batch-size", str(batch_of(sweep)), "--accumulate", str(acc)]
                run(
                    [
                        "run.py",
                        "project",
                        *refs,
                        "--commbench",
                        str(commbench_root / rate),
                        *plan,
                        "--grad-compression",
                        comp,
                        "--output",
                        str(path),
                    ]
                )


@app.command()
def revised() -> None:
    """Every case with the revised model (the micro-batch measured), and the held-out sweep, before measuring it."""
    predict_every((*CASES, HELDOUT), REVISED, OUT / "commbench")


@app.command()
def loaded() -> None:
    """Every case with the third model (commbench-load's fits; the slowest rank), and its held-out sweeps, before
    measuring them."""
    predict_every(THIRD_SWEEPS, LOADED, LOADED_COMMBENCH, co_reference_dirs)


LOADED_COMMBENCH_SECTION = "## Measured under load, and with fp16 compression"
SHOWN_SIZES = (262144, 1048576, 4194304, 16777216)  # the validation's buckets and fusions are in this range


def loaded_commbench_lines(rates: tuple[str, ...] = RATES) -> list[str]:
    """Per rate and size: each library's time uncompressed and with fp16, its CPU time on an idle core and what it
    took from a computing thread on its core; then the fits of the last."""
    from distbench.planning import commbench_report as cb
    from distbench.planning.bandwidth import size_text

    lines = [
        LOADED_COMMBENCH_SECTION,
        "",
        f"Produced by `python -m benchmarks.projection commbench-load` (each rate: `run.py commbench --backends "
        f"{BACKENDS} {' '.join(NODES)} --link-rate RATE {' '.join(PER_NODE)} --grad-compression none,fp16 --sizes "
        f"4 KiB..16 MiB --repeats 5 --rounds 2 --out docs/results/projection/commbench-load/RATE`) on {machine()}; "
        "this section by `python -m benchmarks.projection commbench-doc`. Medians over 10 repeats (5 per launch, 2 "
        "launches alternating the order). Each cell: time ms uncompressed / with fp16 (S is the float32 gradient's "
        "bytes; half travel); then CPU ms on an idle core / ms taken under load, uncompressed.",
        "",
    ]
    fit_rows = []
    for rate in rates:
        out = LOADED_COMMBENCH / rate
        rows = cb.summarize([json.loads(line) for line in (out / cb.RECORDS).read_text().splitlines()])
        by = {(r["backend"], r["grad_compression"], r["size_bytes"]): r for r in rows}
        names = sorted({r["backend"] for r in rows})
        lines += [
            f"### {rate if rate != 'none' else 'unshaped'} (under load)",
            "",
            "| size | " + " | ".join(f"{b}: time / fp16 ms; CPU idle / taken ms" for b in names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for size in SHOWN_SIZES:
            cells = []
            for b in names:
                plain, half = by[b, "none", size], by[b, "fp16", size]
                cells.append(
                    f"{plain['time_s'] * 1e3:.2f} / {half['time_s'] * 1e3:.2f}; "
                    f"{plain['cpu_s'] * 1e3:.2f} / {plain['loaded_cpu_s'] * 1e3:.2f}"
                )
            lines.append(f"| {size_text(size)} | " + " | ".join(cells) + " |")
        lines.append("")
        fitted = json.loads((out / cb.FIT).read_text())
        for b in names:
            for comp, f in (("none", fitted[b]), ("fp16", fitted[b]["compressed"]["fp16"])):
                fit_rows.append(
                    f"| {rate} | {cb.label(b, comp)} | {_cell(f, 'alpha_s', 1e3)} | "
                    f"{_cell(f, 'beta_s_per_byte', 1e9)} | "
                    f"{_cell(f, 'cpu_alpha_s', 1e3)} | {_cell(f, 'cpu_beta_s_per_byte', 1e9)} | "
                    f"{_cell(f, 'loaded_cpu_alpha_s', 1e3)} | {_cell(f, 'loaded_cpu_beta_s_per_byte', 1e9)} |"
                )
    return lines + [
        "### Fits: time, CPU time on an idle core, and the computation taken under load",
        "",
        "| link | backend | alpha ms | beta ns/B | CPU alpha ms | CPU beta ns/B | taken alpha ms | taken beta ns/B |",
        "|---|---|---|---|---|---|---|---|",
        *fit_rows,
        "",
    ]


@app.command("commbench-doc")
def commbench_doc(
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "commbench.md",
    which: Annotated[str, typer.Option(help="The sections to write: first, loaded.")] = "first,loaded",
) -> None:
    chosen = which.split(",")
    for name, section, lines_of in (
        ("first", COMMBENCH_SECTION, commbench_lines),
        ("loaded", LOADED_COMMBENCH_SECTION, loaded_commbench_lines),
    ):
        if name in chosen and (name == "first" or LOADED_COMMBENCH.exists()):
            lines = lines_of()
            write_section(out, section, lines)
            print("\n".join(lines))


@app.command()
def table(
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "projection.md",
    models: Annotated[str, typer.Option(help="The sections to write: first, revised, third.")] = "first,revised,third",
) -> None:
    chosen = models.split(",")
    sections = (
        ("first", CASES, None, OUT, "validation.json", (SECTION, FIRST_SOURCE, ())),
        (
            "revised",
            (*CASES, HELDOUT),
            REVISED,
            OUT,
            "validation-revised.json",
            (REVISED_SECTION, REVISED_SOURCE, (HELDOUT,)),
        ),
        (
            "third",
            THIRD_SWEEPS,
            LOADED,
            THIRD,
            "validation-loaded.json",
            (LOADED_SECTION, LOADED_SOURCE, HELDOUT_LOADED),
        ),
    )
    for name, sweeps, folder, root, json_name, (section, source, heldout) in sections:
        if name not in chosen or (folder is not None and not folder.exists()):
            continue
        data = rows(sweeps, folder, root)
        write_json(OUT / json_name, data, indent=1)
        where = f"docs/results/projection/{root.relative_to(OUT)}/".replace("/./", "/")
        lines = table_lines(data, section, source, heldout, where, recorded_machine(sweeps, root))
        write_section(out, section, lines)
        print("\n".join(lines))


if __name__ == "__main__":
    app()
