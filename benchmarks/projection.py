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

Everything goes under docs/results/projection/ (commbench/RATE, TASK-reference, predictions/, TASK-SWEEP); each step
is the commands a user types (`run.py commbench`, `compare`, `project`), so the validation is of the tool as used.
Two simulated nodes x 1 process, one thread each, each node on its own core, per-node links (netns.py). The cases
are `CASES`, in one place.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env, machine, write_section

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


def batch_of(sweep: Sweep) -> int:
    args = list(sweep.task_args)
    return int(args[args.index("--batch-size") + 1]) if "--batch-size" in args else DEFAULT_BATCH[sweep.task]


DEFAULT_BATCH = {"mnist": 64, "resnet18": 32, "bert": 32}


def reference_dirs(task: str) -> list[Path]:
    return [OUT / f"{task}-reference", *(OUT / f"{task}-reference-b{b}" for b in MICRO_BATCHES[task])]


def run(args: list[str]) -> None:
    print("+ python " + " ".join(args), file=sys.stderr, flush=True)
    subprocess.run([sys.executable, *args], cwd=ROOT, env=child_env(), check=True)


def prediction_path(sweep: Sweep, rate: str, acc: int, comp: str, revised: bool = False) -> Path:
    if revised:
        return REVISED / f"{sweep.name}-{rate}-acc{acc}-{comp}.json"
    return OUT / "predictions" / f"{sweep.task}-{rate}-acc{acc}-{comp}.json"


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def commbench(repeats: int = 10, rounds: int = 2) -> None:
    for rate in RATES:
        out = OUT / "commbench" / rate
        if not (out / "fit.json").exists():
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
                    "--repeats",
                    str(repeats),
                    "--rounds",
                    str(rounds),
                    "--out",
                    str(out),
                ]
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


@app.command()
def measure() -> None:
    heldout = (HELDOUT,) if REVISED.exists() else ()  # measured only after `revised` predicted it
    for sweep in (*CASES, *heldout):
        out = OUT / sweep.name
        if not (out / "report.md").exists():
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


def measured(sweep: Sweep) -> dict[tuple, list[float]]:
    """samples/s of every ok run of the sweep, by (backend, rate, accumulate, compression)."""
    from distbench.sweep import report

    out: dict[tuple, list[float]] = {}
    for r in report.load([OUT / sweep.name]).records:
        if r["status"] == "ok":
            key = (r["backend"], r.get("link_rate") or "none", r["accumulate"], r["grad_compression"])
            out.setdefault(key, []).append(r["samples_per_sec"])
    return out


def rows(sweeps: tuple[Sweep, ...] = CASES, revised: bool = False) -> list[dict]:
    """Every case: predicted and measured samples/s, and the error of the prediction."""
    out = []
    for sweep in sweeps:
        got = measured(sweep)
        for rate, acc, comp in sweep.cases():
            for p in json.loads(prediction_path(sweep, rate, acc, comp, revised).read_text()):
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


def table_lines(data: list[dict], section: str = SECTION, source: str = FIRST_SOURCE) -> list[str]:
    errors = [abs(r["error"]) for r in data if r["error"] is not None]
    heldout = [abs(r["error"]) for r in data if r["error"] is not None and r["sweep"] == HELDOUT.name]
    lines = [
        section,
        "",
        f"Produced by `python -m benchmarks.projection table` on {machine()}, {source}, and the sweeps in "
        "docs/results/projection/. Error = (predicted - measured) / measured, measured = the median samples/s over "
        "the rounds (min-max beside it).",
        "",
        f"**{len(errors)} cases: median absolute error {100 * statistics.median(errors):.1f} %, largest "
        f"{100 * max(errors):.1f} %; {sum(e <= 0.2 for e in errors)} within 20 %, {sum(e <= 0.1 for e in errors)} "
        "within 10 %.**"
        if errors
        else "No measured case yet.",
        *(
            [
                "",
                f"**The held-out sweep alone ({len(heldout)} cases): median absolute error "
                f"{100 * statistics.median(heldout):.1f} %, largest {100 * max(heldout):.1f} %.**",
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
    from distbench.scaling import commbench as cb

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
            lines.append(f"| {cb._size(size)} | " + " | ".join(cells) + " |")
        lines.append("")
        bits = link.parse_rate(rate)
        for b in names:
            f = fitted[b]
            fits_rows.append(
                f"| {rate} | {b} | {f['alpha_s'] * 1e3:.3f} | {f['bus_bandwidth_Bps'] / 1e6:.1f} | "
                f"{f['cpu_alpha_s'] * 1e3:.3f} | {f['cpu_beta_s_per_byte'] * 1e9:.3f} |"
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
        f"### The largest message ({cb._size(sizes[-1])}) against the link",
        "",
        "| link | backend | link MB/s | busbw MB/s | busbw / link |",
        "|---|---|---|---|---|",
        *limit_rows,
        "",
    ]
    return lines


@app.command("micro-reference")
def micro_reference(repeats: int = 5) -> None:
    for task, batches in MICRO_BATCHES.items():
        for b in batches:
            out = OUT / f"{task}-reference-b{b}"
            if not (out / "report.md").exists():
                rounds = repeats if task == "mnist" else 3
                args = [*TASK_ARGS[task], "--batch-size", str(b), "--backends", "single", "--nprocs", "1"]
                run(["run.py", "compare", *args, "--threads", "1", "--repeats", str(rounds), "--out", str(out)])


@app.command()
def revised() -> None:
    """Every case with the revised model (the micro-batch measured), and the held-out sweep, before measuring it."""
    REVISED.mkdir(parents=True, exist_ok=True)
    for sweep in (*CASES, HELDOUT):
        for rate, acc, comp in sweep.cases():
            path = prediction_path(sweep, rate, acc, comp, revised=True)
            if not path.exists():
                refs = [str(d) for d in reference_dirs(sweep.task)]
                plan = [*NODES, "--batch-size", str(batch_of(sweep)), "--accumulate", str(acc)]
                run(
                    [
                        "run.py",
                        "project",
                        *refs,
                        "--commbench",
                        str(OUT / "commbench" / rate),
                        *plan,
                        "--grad-compression",
                        comp,
                        "--output",
                        str(path),
                    ]
                )


@app.command("commbench-doc")
def commbench_doc(out: Annotated[Path, typer.Option()] = ROOT / "docs" / "commbench.md") -> None:
    lines = commbench_lines()
    write_section(out, COMMBENCH_SECTION, lines)
    print("\n".join(lines))


@app.command()
def table(out: Annotated[Path, typer.Option()] = ROOT / "docs" / "projection.md") -> None:
    data = rows()
    (OUT / "validation.json").write_text(json.dumps(data, indent=1) + "\n")
    lines = table_lines(data)
    write_section(out, SECTION, lines)
    print("\n".join(lines))
    if REVISED.exists():
        data = rows((*CASES, HELDOUT), revised=True)
        (OUT / "validation-revised.json").write_text(json.dumps(data, indent=1) + "\n")
        lines = table_lines(data, REVISED_SECTION, REVISED_SOURCE)
        write_section(out, REVISED_SECTION, lines)
        print("\n".join(lines))


if __name__ == "__main__":
    app()
