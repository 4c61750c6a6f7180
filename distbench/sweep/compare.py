"""`run.py compare` as one call: the sweep's own options checked, the plan made and checked whole before the first
launch, sweep.json written, every round run, the report written (cli/sweep.py only parses)."""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from distbench.config import DEFAULTS, FIELDS, POSITIVE, check_dir_option, flag, to_args
from distbench.errors import UserError
from distbench.records import write_json
from distbench.sweep.check import check_sweep
from distbench.sweep.executor import executor_for
from distbench.sweep.plan import axis_values, plan_runs, round_orders
from distbench.sweep.runner import RESULTS, Sweep, run_sweep


@dataclass(frozen=True)
class CompareRequest:
    """What `compare` was given."""

    out: Path
    axes: dict[str, str]  # each swept axis's option as given (comma-separated values)
    scheduler: str
    slurm_launch: str
    threads: int | None
    repeats: int
    order_seed: int
    run_timeout_s: int
    restarts: int  # the launchers restart a failed run's processes up to this many times; 0: not at all
    forwarded: dict  # the run options forwarded to every run (RunConfig's FORWARD fields; None: not given)
    extra: str  # run.py options passed on as given
    extra_values: dict  # the same, read by run.py's parser (RunConfig's fields)
    command_line: str


@dataclass(frozen=True)
class Outcome:
    """How a sweep ended: its runs, how many failed, whether Ctrl-C stopped it, and its report."""

    runs: int
    failed: int
    interrupted: bool
    report: Path


def run(request: CompareRequest) -> Outcome:
    """Check, plan, run and report one sweep (module docstring); bad input is a UserError before anything is
    launched or written."""
    given = {**request.forwarded, **request.extra_values}  # what every run gets: --extra comes last, and wins
    _check(request, given)
    executor = executor_for(request.scheduler, request.slurm_launch, request.restarts)
    task = given["task"] or DEFAULTS["task"]
    emulated = given.get("emulate") is not None
    planned = plan_runs(
        task_name(task), axis_values(request.axes), request.threads, executor.cpus_per_node, not emulated
    )
    # every configuration before the first launch; last: a shaped link re-runs this command in a private namespace
    check_sweep([p.config for p in planned], {**given, "task": task}, executor)
    forwarded = to_args({**request.forwarded, "task": None})
    base_args = ["--task", task, *forwarded, "--no-progress", *shlex.split(request.extra)]
    orders = round_orders(len(planned), request.repeats, request.order_seed)
    sweep = Sweep(request.out, task_name(task), base_args, planned, orders, request.run_timeout_s, request.restarts > 0)
    request.out.mkdir(parents=True, exist_ok=True)
    described = sweep.describe(request.command_line, request.repeats, request.order_seed)
    write_json(request.out / "sweep.json", described, indent=2)
    return _run(sweep, executor)


def _run(sweep: Sweep, executor) -> Outcome:
    t0 = time.time()
    try:
        records = run_sweep(sweep, executor)
    except KeyboardInterrupt:
        print(f"interrupted: the current run was stopped; records so far are in {sweep.out / RESULTS}", file=sys.stderr)
        _write_report(sweep.out)
        return Outcome(0, 0, True, sweep.out / "report.md")
    print(f"sweep done in {time.time() - t0:.0f} s", file=sys.stderr)
    report_md = _write_report(sweep.out)
    print(report_md.split("## Environment")[0].rstrip())
    print(f"\nreport: {sweep.out / 'report.md'} (plots, summary.csv and {RESULTS} beside it)")
    return Outcome(len(records), sum(r["status"] != "ok" for r in records), False, sweep.out / "report.md")


def _check(request: CompareRequest, run_values: dict) -> None:
    """The sweep's options that no run would catch before it starts, and the own checks of each option every run gets
    (forwarded or in --extra): one line each, before any run."""
    for option, value in (("--threads", request.threads), ("--repeats", request.repeats)):
        if (error := POSITIVE.error(option, value)) is not None:
            raise UserError(error)
    if request.restarts < 0:
        raise UserError(f"--restarts must be 0 or more, got {request.restarts}")
    for name, value in run_values.items():
        for check in FIELDS[name].metadata["checks"]:
            if (error := check.error(flag(name), value)) is not None:
                raise UserError(error)
    check_dir_option("data_dir", run_values.get("data_dir"))
    results = request.out / RESULTS
    if results.exists():
        raise UserError(
            f"{results.parent} already holds a sweep ({results.name}); choose another --out (nothing is overwritten)"
        )


def task_name(spec: str) -> str:
    """The name a task's records carry (a user's task: its `name`, else its class name); a task that cannot be
    loaded is one line before any run."""
    from distbench.tasks import task_class

    cls = task_class(spec)
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) else cls.__name__


def _write_report(out: Path) -> str:
    from distbench.sweep.report import write_report

    return write_report([out], out)
