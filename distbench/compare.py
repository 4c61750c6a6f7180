"""`run.py compare`: run backends x world sizes with their real launchers, one at a time, and report.

With `--repeats N` the sweep is N rounds; each round runs every configuration once, in an order shuffled per
round from `--order-seed` (recorded in sweep.json), so that a slow drift of the machine hits every
configuration alike and paired ratios within a round cancel it (distbench/stats.py). Each run is a
subprocess in its own process group with a timeout; a failed run is recorded with its last error lines and
the sweep goes on. Ctrl-C stops the current run's processes and keeps the records written so far (and the
report of them).
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from backends import NAMES, get_spec, typed_command
from distbench.config import GradCompression, TaskName, default_threads
from distbench.errors import UserError
from distbench.launch import resolve

compare_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


def _csv(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise UserError(f"--{what} is empty")
    return items


def _positive_ints(value: str, what: str) -> list[int]:
    try:
        items = [int(n) for n in _csv(value, what)]
    except ValueError as e:
        raise UserError(f"--{what} must be comma-separated integers, got {value!r}") from e
    if any(n <= 0 for n in items):
        raise UserError(f"--{what} values must be positive")
    return items


@dataclass(frozen=True)
class Planned:
    """One configuration of a sweep (the fields report.CONFIG_FIELDS names, but the task)."""

    backend: str
    world_size: int
    threads: int
    accumulate: int = 1
    grad_compression: str = "none"
    baseline: bool = False  # added only as the reference of speed-up and efficiency

    @property
    def label(self) -> str:
        return f"{self.backend} x{self.world_size} t{self.threads} acc{self.accumulate} {self.grad_compression}"

    def args(self) -> list[str]:
        return ["--threads", str(self.threads), "--accumulate", str(self.accumulate),
                "--grad-compression", self.grad_compression]  # fmt: skip


def plan_runs(backends: list[str], nprocs: list[int], threads: int | None, accumulates: tuple[int, ...] = (1,),
              compressions: tuple[str, ...] = ("none",)) -> list[Planned]:  # fmt: skip
    """Every backend x world size x accumulate x compression. `single` runs at world size 1 and without
    compression only; a `single` run is added for every (threads, accumulate) used, as the reference of
    speed-up and efficiency."""
    runs = []
    for backend in backends:
        for n in nprocs:
            for k in accumulates:
                for c in compressions:
                    if backend == "single" and (n != 1 or c != "none"):
                        continue
                    runs.append(Planned(backend, n, threads or default_threads(n), k, c))
    have = {(r.threads, r.accumulate) for r in runs if r.backend == "single"}
    wanted = sorted({(r.threads, r.accumulate) for r in runs}, key=lambda tk: (-tk[0], tk[1]))
    baselines = [Planned("single", 1, t, k, baseline=True) for t, k in wanted if (t, k) not in have]
    return baselines + runs


def round_orders(n_configs: int, repeats: int, seed: int) -> list[list[int]]:
    """The order of the configurations in each round: as planned for a single round, else shuffled per round
    from the seed (the same seed gives the same orders)."""
    if repeats == 1:
        return [list(range(n_configs))]
    rng = random.Random(seed)
    orders = []
    for _ in range(repeats):
        order = list(range(n_configs))
        rng.shuffle(order)
        orders.append(order)
    return orders


def _tail(text: str, n: int = 12) -> str:
    """The last lines of a failed run's log, ending with the most telling one: distbench's own one-line
    error if there is one, else the last exception line, else the last line (launchers add pages of
    their own failure reports after the cause)."""
    lines = [line for line in text.splitlines() if line.strip()]
    cause = [line for line in lines if re.search(r"(^|:)error: ", line)]
    cause = cause or [line for line in lines if re.match(r"^(\[\w+\]:?\s*(<stderr>:)?)?\w*(Error|Exception): ", line)]
    return "\n".join(lines[-n:] + cause[-1:])


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop a run and everything its launcher started (launchers spawn workers in the same session)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_one(cmd: list[str], out_json: Path, timeout_s: float, log_path: Path) -> dict:
    """Run one launcher command; returns the results record plus sweep fields, or a failure record."""
    started = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, text=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return {"status": "failed", "error": f"timed out after {timeout_s:.0f} s\n" + _tail(log_path.read_text())}
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
    elapsed = time.time() - started
    if rc != 0 or not out_json.exists():
        return {"status": "failed", "returncode": rc, "error": _tail(log_path.read_text()), "elapsed_s": elapsed}
    record = json.loads(out_json.read_text())
    record["status"] = "ok"
    record["elapsed_s"] = elapsed
    if record.get("first_step_unix"):
        record["launch_to_first_step_s"] = record["first_step_unix"] - started
    return record


@compare_app.command(help="Run every backend at several world sizes with its real launcher and report.")
def compare(
    out: Annotated[Path, typer.Option(help="Output folder (results.jsonl, summary.csv, report.md, plots).")],
    task: Annotated[TaskName, typer.Option()] = TaskName.mnist,
    backends: Annotated[str, typer.Option(help="Comma-separated backends.")] = ",".join(NAMES),
    nprocs: Annotated[str, typer.Option(help="Comma-separated world sizes.")] = "1,2",
    max_steps: Annotated[int | None, typer.Option(help="Global steps per run.")] = None,
    epochs: Annotated[int | None, typer.Option(help="Epochs per run (default: the task's).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Global batch size.")] = None,
    threads: Annotated[
        int | None, typer.Option(help="Threads per process (default: usable CPUs / processes of that run).")
    ] = None,
    seed: Annotated[int, typer.Option()] = 0,
    data_dir: Annotated[Path | None, typer.Option()] = None,
    target_accuracy: Annotated[float | None, typer.Option(help="Record the time to reach this accuracy.")] = None,
    run_timeout_s: Annotated[int, typer.Option(help="Per-run timeout; the run is killed and marked failed.")] = 900,
    extra: Annotated[str, typer.Option(help="Extra run.py options, quoted, e.g. '--precision bf16'.")] = "",
    repeats: Annotated[
        int, typer.Option(help="Rounds: every configuration once per round; medians, intervals and verdicts over them.")
    ] = 1,
    accumulate: Annotated[str, typer.Option(help="Comma-separated micro-batches per step, a sweep axis.")] = "1",
    grad_compression: Annotated[
        str, typer.Option(help="Comma-separated gradient compressions (none, fp16, bf16), a sweep axis.")
    ] = "none",
    order_seed: Annotated[int, typer.Option(help="Seed of the shuffled order of each round (recorded).")] = 0,
) -> None:
    backend_list = _csv(backends, "backends")
    for b in backend_list:
        get_spec(b)  # an unknown name is one line
    world_sizes, accumulates = _positive_ints(nprocs, "nprocs"), _positive_ints(accumulate, "accumulate")
    compressions = _csv(grad_compression, "grad-compression")
    _check(out, threads, repeats, compressions, data_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(exist_ok=True)
    base_args = ["--task", task.value, "--seed", str(seed), "--no-progress"]
    for flag, value in (("--max-steps", max_steps), ("--epochs", epochs), ("--batch-size", batch_size),
                        ("--data-dir", data_dir), ("--target-accuracy", target_accuracy)):  # fmt: skip
        if value is not None:
            base_args += [flag, str(value)]
    base_args += shlex.split(extra)

    runs = plan_runs(backend_list, world_sizes, threads, tuple(accumulates), tuple(compressions))
    orders = round_orders(len(runs), repeats, order_seed)
    sweep = {
        "command": "python run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "task": task.value,
        "repeats": repeats,
        "order_seed": order_seed,
        "orders": [[runs[i].label for i in order] for order in orders],
        "runs_planned": len(runs) * repeats,
    }
    (out / "sweep.json").write_text(json.dumps(sweep, indent=2) + "\n")
    t0 = time.time()
    try:
        _run_rounds(out, task.value, base_args, runs, orders, run_timeout_s)
    except KeyboardInterrupt:
        print(f"interrupted: the current run was stopped; records so far are in {out / 'results.jsonl'}",
              file=sys.stderr)  # fmt: skip
        _write_report(out)
        raise typer.Exit(130) from None
    print(f"sweep done in {time.time() - t0:.0f} s", file=sys.stderr)
    report_md = _write_report(out)
    print(report_md.split("## Environment")[0].rstrip())
    print(f"\nreport: {out / 'report.md'} (plots, summary.csv and results.jsonl beside it)")


def _check(out: Path, threads: int | None, repeats: int, compressions: list[str], data_dir: Path | None) -> None:
    """The sweep's options that no run would catch before it starts: one line each."""
    if threads is not None and threads <= 0:
        raise UserError(f"--threads must be positive, got {threads}")
    if repeats <= 0:
        raise UserError(f"--repeats must be positive, got {repeats}")
    for c in compressions:
        if c not in GradCompression.__members__:
            raise UserError(f"--grad-compression: {c!r} is not one of {', '.join(GradCompression.__members__)}")
    if data_dir is not None and not data_dir.is_dir():
        raise UserError(f"--data-dir {data_dir} does not exist")
    if (out / "results.jsonl").exists():
        raise UserError(f"{out} already holds a sweep (results.jsonl); choose another --out (nothing is overwritten)")


def _run_rounds(out: Path, task: str, base_args: list[str], runs: list[Planned], orders: list[list[int]],
                timeout_s: float) -> None:  # fmt: skip
    total = len(runs) * len(orders)
    for round_no, order in enumerate(orders, 1):
        for position, i in enumerate(order, 1):
            done = (round_no - 1) * len(runs) + position
            progress = f"[{done}/{total}]" + (f" round {round_no}/{len(orders)}" if len(orders) > 1 else "")
            _run_config(out, task, base_args, runs[i], round_no, position, progress, timeout_s)


def _run_config(out: Path, task: str, base_args: list[str], run: Planned, round_no: int, position: int,
                progress: str, timeout_s: float) -> None:  # fmt: skip
    """One run of one configuration in one round: launch it, append its record (or its failure) to results.jsonl."""
    name = f"{task}-{run.label.replace(' ', '-')}-r{round_no}"
    out_json = out / "runs" / f"{name}.json"
    out_json.unlink(missing_ok=True)
    cmd = typed_command(run.backend, run.world_size, [*base_args, *run.args(), "--output", str(out_json), "--force"])
    label = f"{progress} {run.label}"
    print(f"{label}: running", file=sys.stderr, flush=True)
    record = run_one(resolve(cmd), out_json, timeout_s, out / "runs" / f"{name}.log")
    record.update(backend=run.backend, world_size=run.world_size, task=task, threads_per_process=run.threads,
                  accumulate=run.accumulate, grad_compression=run.grad_compression, baseline=run.baseline,
                  round=round_no, order=position, command=" ".join(shlex.quote(c) for c in cmd))  # fmt: skip
    with open(out / "results.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
    if record["status"] == "ok":
        msg = f"{record['samples_per_sec']:.1f} samples/s, accuracy {record['eval_accuracy']:.4f}"
    else:
        msg = "FAILED: " + record["error"].splitlines()[-1] if record["error"] else "FAILED"
    print(f"{label}: {msg}", file=sys.stderr, flush=True)


def _write_report(out: Path) -> str:
    from distbench.report import write_report

    return write_report([out], out)


@compare_app.command(help="Rebuild the report (summary.csv, report.md, plots) from compare folders.")
def report(
    dirs: Annotated[list[Path], typer.Argument(help="Folders written by `run.py compare`.")],
    out: Annotated[Path | None, typer.Option(help="Where to write (default: the first folder).")] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(help="An older sweep folder: each configuration of DIRS gets a verdict against the same one."),
    ] = None,
) -> None:
    for d in [*dirs, *([baseline] if baseline is not None else [])]:
        if not (d / "results.jsonl").is_file():
            raise UserError(f"{d} holds no results.jsonl (was it written by `run.py compare`?)")
    from distbench.report import write_report

    built_by = "python run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    print(write_report(dirs, out or dirs[0], built_by, baseline))
