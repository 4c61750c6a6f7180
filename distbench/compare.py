"""`run.py compare`: run backends x world sizes with their real launchers, one at a time, and report.

With `--repeats N` the sweep is N rounds; each round runs every configuration once, in an order shuffled per
round from `--order-seed` (recorded in sweep.json), so that a slow drift of the machine hits every
configuration alike and paired ratios within a round cancel it (distbench/stats.py). Each run is a
subprocess in its own process group with a timeout; a failed run is recorded with its last error lines and
the sweep goes on. Ctrl-C stops the current run's processes and keeps the records written so far (and the
report of them).
"""

from __future__ import annotations

import itertools
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
from distbench import link, topology
from distbench.config import GradCompression, available_cpus
from distbench.errors import UserError
from distbench.launch import resolve
from distbench.reporter import append_line

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
    world_size: int  # all processes, over all nodes
    threads: int
    accumulate: int = 1
    grad_compression: str = "none"
    baseline: bool = False  # added only as the reference of speed-up and efficiency
    nodes: int = 1  # simulated nodes of world_size / nodes processes each (distbench/topology.py)
    link_rate: str = link.UNSHAPED  # the loopback's rate during the run (distbench/link.py)

    @property
    def label(self) -> str:
        label = f"{self.backend} x{self.world_size} t{self.threads} acc{self.accumulate} {self.grad_compression}"
        return (
            label
            + (f" {self.nodes}nodes" if self.nodes > 1 else "")
            + (f" link-{self.link_rate}" if self.link_rate != link.UNSHAPED else "")
        )

    def args(self) -> list[str]:
        return ["--threads", str(self.threads), "--accumulate", str(self.accumulate),
                "--grad-compression", self.grad_compression]  # fmt: skip

    def launch(self, args: list[str]) -> topology.NodeLaunch:
        return launch_config(self.backend, self.world_size, self.nodes, args)


def launch_config(backend: str, world_size: int, nodes: int, args: list[str]) -> topology.NodeLaunch:
    """The command(s) that start `run.py --backend BACKEND ARGS` with world_size processes: the backend's usual
    launcher, as `nodes` simulated nodes when there are several."""
    if nodes == 1:
        return topology.NodeLaunch([typed_command(backend, world_size, args)], {})
    spec = get_spec(backend)
    return topology.node_launch(spec.launchers[0], spec.program(args), nodes, world_size // nodes)


@dataclass(frozen=True)
class Axes:
    """The sweep's axes, parsed from their comma-separated options and checked: one line for a bad value."""

    backends: list[str]
    world_sizes: list[int]
    accumulates: tuple[int, ...]
    compressions: tuple[str, ...]
    nodes: tuple[int, ...]
    link_rates: tuple[str, ...]

    @classmethod
    def parse(cls, backends: str, nprocs: str, accumulate: str, compressions: str, nodes: str, rates: str) -> Axes:
        axes = cls(_csv(backends, "backends"), _positive_ints(nprocs, "nprocs"),
                   tuple(_positive_ints(accumulate, "accumulate")), tuple(_csv(compressions, "grad-compression")),
                   tuple(_positive_ints(nodes, "nodes")), tuple(_csv(rates, "link-rate")))  # fmt: skip
        for b in axes.backends:
            get_spec(b)  # an unknown name is one line
        for c in axes.compressions:
            if c not in GradCompression.__members__:
                raise UserError(f"--grad-compression: {c!r} is not one of {', '.join(GradCompression.__members__)}")
        return axes

    def check_topology(self) -> None:
        """Nodes and link rates that cannot run here: one line, before any run (and before any namespace)."""
        for k in self.nodes:
            if k > 1:
                topology.SimulatedNodes.split(k)  # a core per node
                for b in self.backends:
                    if b != "single":
                        topology.hosts(get_spec(b).launchers[0], k)
        if any([link.parse_rate(rate) is not None for rate in self.link_rates]):  # every rate parsed: one line
            link.enter_private_namespace()  # re-runs this command there; returns once inside


def plan_runs(backends: list[str], nprocs: list[int], threads: int | None, accumulates: tuple[int, ...] = (1,),
              compressions: tuple[str, ...] = ("none",), nodes: tuple[int, ...] = (1,),
              link_rates: tuple[str, ...] = (link.UNSHAPED,)) -> list[Planned]:  # fmt: skip
    """Every backend x nodes x processes per node x accumulate x compression x link rate. `single` runs on one
    node of one process, unshaped and without compression only; a `single` run is added for every (threads,
    accumulate) used, as the reference of speed-up and efficiency. Threads default to each node's share of the
    usable CPUs divided among its processes."""
    runs = []
    for backend in backends:
        for k, n, acc, c, rate in itertools.product(nodes, nprocs, accumulates, compressions, link_rates):
            if backend == "single" and (k * n != 1 or c != "none" or rate != link.UNSHAPED):
                continue
            t = threads or max(1, available_cpus() // k // n)
            runs.append(Planned(backend, k * n, t, acc, c, nodes=k, link_rate=rate))
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


PEER_GRACE_S = 30  # after one agent of a multi-node run fails, how long the others get to fail on their own


def _wait_all(procs: list[subprocess.Popen], timeout_s: float) -> int:
    """Wait for every process; the first non-zero exit code, or 0. A process that outlives a failed peer by
    PEER_GRACE_S (an agent waiting at a rendezvous that will never complete) is stopped."""
    deadline, failed_at = time.monotonic() + timeout_s, None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return next((c for c in codes if c != 0), 0)
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > PEER_GRACE_S:
            for p in procs:
                _kill_group(p)
            continue
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired([p.args for p in procs], timeout_s)
        time.sleep(0.05)


def run_one(cmds: list[list[str]], out_json: Path, timeout_s: float, log_path: Path,
            env: dict[str, str] | None = None) -> dict:  # fmt: skip
    """Run one configuration's launcher commands (several: one agent per simulated node) together, with `env`
    added; returns the results record plus sweep fields, or a failure record."""
    started = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        procs = [subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, text=True,
                                  env={**os.environ, **(env or {})}) for cmd in cmds]  # fmt: skip
        try:
            rc = _wait_all(procs, timeout_s)
        except subprocess.TimeoutExpired:
            for p in procs:
                _kill_group(p)
            return {"status": "failed", "error": f"timed out after {timeout_s:.0f} s\n" + _tail(log_path.read_text())}
        except KeyboardInterrupt:
            for p in procs:
                _kill_group(p)
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
    task: Annotated[
        str,
        typer.Option(
            help="mnist, bert-sentiment, synthetic-resnet or package.module:Class / "
            "path/to/file.py:Class (docs/tasks.md)."
        ),
    ] = "mnist",
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
    nodes: Annotated[
        str,
        typer.Option(
            help="Comma-separated simulated node counts, a sweep axis: each node runs --nprocs processes on "
            "its own share of the cores, started with the launcher's multi-node form."
        ),
    ] = "1",
    link_rate: Annotated[
        str,
        typer.Option(
            help="Comma-separated link rates (e.g. none,1gbit,100mbit), a sweep axis: the sweep runs in a "
            "private network namespace whose loopback is shaped with tc (needs root or user namespaces)."
        ),
    ] = link.UNSHAPED,
) -> None:
    axes = Axes.parse(backends, nprocs, accumulate, grad_compression, nodes, link_rate)
    _check(out, threads, repeats, data_dir)
    task_name = _task_name(task)
    axes.check_topology()  # last: a shaped link re-runs this command in a private namespace
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(exist_ok=True)
    base_args = _run_args(task, seed, extra, max_steps=max_steps, epochs=epochs, batch_size=batch_size,
                          data_dir=data_dir, target_accuracy=target_accuracy)  # fmt: skip
    runs = plan_runs(axes.backends, axes.world_sizes, threads, axes.accumulates, axes.compressions, axes.nodes,
                     axes.link_rates)  # fmt: skip
    orders = round_orders(len(runs), repeats, order_seed)
    sweep = {
        "command": "python run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "task": task_name,
        "repeats": repeats,
        "order_seed": order_seed,
        "orders": [[runs[i].label for i in order] for order in orders],
        "runs_planned": len(runs) * repeats,
    }
    (out / "sweep.json").write_text(json.dumps(sweep, indent=2) + "\n")
    t0 = time.time()
    try:
        _run_rounds(out, task_name, base_args, runs, orders, run_timeout_s)
    except KeyboardInterrupt:
        print(f"interrupted: the current run was stopped; records so far are in {out / 'results.jsonl'}",
              file=sys.stderr)  # fmt: skip
        _write_report(out)
        raise typer.Exit(130) from None
    print(f"sweep done in {time.time() - t0:.0f} s", file=sys.stderr)
    report_md = _write_report(out)
    print(report_md.split("## Environment")[0].rstrip())
    print(f"\nreport: {out / 'report.md'} (plots, summary.csv and results.jsonl beside it)")


def _check(out: Path, threads: int | None, repeats: int, data_dir: Path | None) -> None:
    """The sweep's options that no run would catch before it starts: one line each."""
    if threads is not None and threads <= 0:
        raise UserError(f"--threads must be positive, got {threads}")
    if repeats <= 0:
        raise UserError(f"--repeats must be positive, got {repeats}")
    if data_dir is not None and not data_dir.is_dir():
        raise UserError(f"--data-dir {data_dir} does not exist")
    if (out / "results.jsonl").exists():
        raise UserError(f"{out} already holds a sweep (results.jsonl); choose another --out (nothing is overwritten)")


def _run_args(task: str, seed: int, extra: str, **options) -> list[str]:
    """The run.py options every run of the sweep shares: the task, the seed, the options given, then --extra."""
    args = ["--task", task, "--seed", str(seed), "--no-progress"]
    for name, value in options.items():
        if value is not None:
            args += ["--" + name.replace("_", "-"), str(value)]
    return args + shlex.split(extra)


def _task_name(spec: str) -> str:
    """The name a task's records carry (a user's task: its `name`, else its class name); a task that cannot be
    loaded is one line before any run."""
    from distbench.tasks import task_class

    cls = task_class(spec)
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) else cls.__name__


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
    started = run.launch([*base_args, *run.args(), "--output", str(out_json), "--force"])
    label = f"{progress} {run.label}"
    print(f"{label}: running", file=sys.stderr, flush=True)
    if link.inside():
        link.shape(run.link_rate)
    env = {**started.env, **link.run_env(run.link_rate)}
    record = run_one([resolve(c) for c in started.commands], out_json, timeout_s, out / "runs" / f"{name}.log", env)
    record.update(backend=run.backend, world_size=run.world_size, task=task, threads_per_process=run.threads,
                  accumulate=run.accumulate, grad_compression=run.grad_compression, baseline=run.baseline,
                  nodes=run.nodes, link_rate=run.link_rate, round=round_no, order=position,
                  command=started.shell())  # fmt: skip
    append_line(out / "results.jsonl", json.dumps(record, sort_keys=True))
    if record["status"] == "ok":
        msg = f"{record['samples_per_sec']:.1f} samples/s, accuracy {record['eval_accuracy']:.4f}"
    else:
        msg = "FAILED: " + record["error"].splitlines()[-1] if record["error"] else "FAILED"
    print(f"{label}: {msg}", file=sys.stderr, flush=True)


def _write_report(out: Path) -> str:
    from distbench.report import write_report

    return write_report([out], out)


@compare_app.command(
    help="Run one training job as simulated nodes, each on its own cores, optionally over a shaped link; the "
    "options after -- are run.py's training options (--output says where the record goes).",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def simulate(
    ctx: typer.Context,
    backend: Annotated[str, typer.Option(help="ddp, accelerate or horovod.")],
    nodes: Annotated[int, typer.Option(help="Simulated nodes, each on its own share of the cores.")] = 2,
    nprocs: Annotated[int, typer.Option(help="Processes per node.")] = 1,
    link_rate: Annotated[str, typer.Option(help="Rate of the shaped loopback, e.g. 1gbit or 100mbit.")] = link.UNSHAPED,
    run_timeout_s: Annotated[int, typer.Option(help="Stop the job after this long.")] = 3600,
) -> None:
    if get_spec(backend).launchers[0].name == "python":
        raise UserError(f"--backend {backend} runs one process; simulate a distributed backend")
    if nodes <= 0 or nprocs <= 0:
        raise UserError("--nodes and --nprocs must be positive")
    train_args = [a for a in ctx.args if a != "--"]
    if "--backend" in train_args:
        raise UserError("give --backend before --, as simulate's own option")
    Axes([backend], [nodes * nprocs], (1,), ("none",), (nodes,), (link_rate,)).check_topology()
    if link.inside():
        link.shape(link_rate)
    started = launch_config(backend, nodes * nprocs, nodes, train_args)
    print(f"running: {started.shell()}", file=sys.stderr, flush=True)
    env = {**os.environ, **started.env, **link.run_env(link_rate)}
    procs = [subprocess.Popen(resolve(cmd), env=env, start_new_session=True) for cmd in started.commands]
    try:
        rc = _wait_all(procs, run_timeout_s)
    except subprocess.TimeoutExpired:
        for p in procs:
            _kill_group(p)
        raise UserError(f"the job ran past --run-timeout-s {run_timeout_s} and was stopped") from None
    except KeyboardInterrupt:
        for p in procs:
            _kill_group(p)
        raise
    raise typer.Exit(rc)


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
