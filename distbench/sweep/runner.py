"""Running a planned sweep: every configuration once per round, in each round's order, through an executor.

With several rounds, each round's order is shuffled from a recorded seed (sweep.json), so that a slow drift of the
machine hits every configuration alike and paired ratios within a round cancel it (distbench/sweep/stats.py). Each
run's record, or its failure with the cause, is appended to results.jsonl and the sweep goes on; Ctrl-C stops the
current run (the executor ends its processes) and keeps what was recorded.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from distbench.backends import spins
from distbench.records import accuracy_missing, append_line, to_json
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.executor import Executor
from distbench.sweep.plan import Planned
from distbench.tasks.emulated import host_bound_said

RESULTS = "results.jsonl"


@dataclass(frozen=True)
class Sweep:
    """A planned sweep: where it writes, what every run shares, its configurations and the order of each round."""

    out: Path
    task: str
    base_args: list[str]  # the run.py options every run shares (task, forwarded options, --extra)
    planned: list[Planned]
    orders: list[list[int]]
    timeout_s: float
    checkpoints: bool = False  # each run checkpoints into a folder of its own (compare --restarts: it resumes there)

    def describe(self, command: str, repeats: int, order_seed: int) -> dict:
        """sweep.json: how the sweep was started and the order of every round."""
        return {
            "command": command,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "task": self.task,
            "repeats": repeats,
            "order_seed": order_seed,
            "orders": [[self.planned[i].config.name() for i in order] for order in self.orders],
            "runs_planned": len(self.planned) * len(self.orders),
        }


def run_sweep(sweep: Sweep, executor: Executor) -> list[dict]:
    """Every round in its order; returns the records appended to results.jsonl, failed runs' among them."""
    (sweep.out / "runs").mkdir(parents=True, exist_ok=True)
    total = len(sweep.planned) * len(sweep.orders)
    records = []
    for round_no, order in enumerate(sweep.orders, 1):
        for position, i in enumerate(order, 1):
            done = (round_no - 1) * len(sweep.planned) + position
            progress = f"[{done}/{total}]" + (f" round {round_no}/{len(sweep.orders)}" if len(sweep.orders) > 1 else "")
            records.append(run_planned(sweep, sweep.planned[i], round_no, position, progress, executor))
    return records


def run_planned(
    sweep: Sweep, planned: Planned, round_no: int, position: int, progress: str, executor: Executor
) -> dict:
    """One run of one configuration in one round: start it, append its record (or its failure, with the cause in
    full: the `error` field's last line) to results.jsonl; returns the record."""
    config = planned.config
    name = f"{sweep.task}-{config.name().replace(' ', '-')}-r{round_no}"
    out_json = sweep.out / "runs" / f"{name}.json"
    out_json.unlink(missing_ok=True)
    args = [*sweep.base_args, *config.run_args(), "--output", str(out_json), "--force"]
    label = f"{progress} {config.name()}"
    print(f"{label}: running", file=sys.stderr, flush=True)
    log = sweep.out / "runs" / f"{name}.log"
    with checkpoint_folder(sweep, name) as resumable:
        record = checked(config, executor.run(config, [*args, *resumable], out_json, log, sweep.timeout_s))
    record.update(baseline=planned.baseline, round=round_no, order=position)
    record["log"] = str(log.relative_to(sweep.out))  # the run's whole output, beside results.jsonl
    append_line(sweep.out / RESULTS, to_json(record, sort_keys=True))
    if record["status"] == "ok":
        missing = accuracy_missing(record)
        accuracy = f"n/a ({missing})" if missing else _said(record["eval_accuracy"], ".4f")
        said = f"{_said(record['samples_per_sec'], '.1f')} samples/s, accuracy {accuracy}"
        if (record.get("fault") or {}).get("kind") == "unplanned":  # a failure no --fault asked for, continued past
            said += f"; continued after a failure (x{record['fault']['world_size_after']} after)"
    else:
        said = "FAILED: " + record["error"].splitlines()[-1] if record["error"] else "FAILED"
    print(f"{label}: {said}", file=sys.stderr, flush=True)
    return record


@contextlib.contextmanager
def checkpoint_folder(sweep: Sweep, name: str) -> Iterator[list[str]]:
    """With `sweep.checkpoints` (compare --restarts), the run's --checkpoint-dir: a fresh folder of its own, from which
    a restarted run resumes and a run of another round never does, removed after the run (its record keeps what the
    restarts cost); else no options."""
    if not sweep.checkpoints:
        yield []
        return
    folder = sweep.out / "runs" / f"{name}.ckpt"
    shutil.rmtree(folder, ignore_errors=True)
    try:
        yield ["--checkpoint-dir", str(folder)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def checked(config: SweepConfig, record: dict) -> dict:
    """The record of a run of `config`: the run's own where it wrote one that agrees with the plan on every axis (its
    processes recorded what they found: world, nodes, threads, link), else a failure saying how it differs. A run
    that wrote none is recorded as planned, failed, with its cause."""
    if record["status"] != "ok":
        return {**record, **config.to_record()}
    differences = config.differences(SweepConfig.from_record(record))
    if differences:
        error = "the run did not run as planned: " + "; ".join(differences)
        return {**record, **config.to_record(), "status": "failed", "error": error}
    if (invalid := host_bound_said(record.get("emulated"), spins(record.get("backend", "")))) is not None:
        return {**record, "status": "failed", "error": invalid}
    return record


def _said(value: float | None, spec: str) -> str:
    """A record's number as the progress line shows it (null: a run with no timed step or no test sample)."""
    return "n/a" if value is None else format(value, spec)
