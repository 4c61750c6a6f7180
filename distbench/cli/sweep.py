"""`run.py compare`, `run.py simulate` and `run.py report`.

compare's options are the sweep's own (where it writes, rounds, order seed, timeouts), one per swept axis of
SweepConfig (a comma-separated list each) and every run option a sweep forwards (RunConfig's FORWARD fields), each
as declared; a forwarded option reaches every run only when it is given.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from distbench.backends import NAMES, REFERENCE, get_spec
from distbench.cli.declared import command, new_app, param, run_options
from distbench.config import AXIS, DEFAULTS, FIELDS, FORWARDED, POSITIVE, SET, check_dir_option, flag, to_args
from distbench.errors import UserError
from distbench.launching import link
from distbench.sweep.configuration import AXES, SWEPT

# the default of each axis's compare option (the others: the axis's own default)
AXIS_DEFAULTS = {"backend": ",".join(NAMES), "world_size": "1,2"}


def _axis_param(name: str) -> str:
    return AXES[name].metadata["option"].removeprefix("--").replace("-", "_")


def compare_params() -> list:
    own = [param("out", Path, help="Output folder (results.jsonl, summary.csv, report.md, plots).")]
    axes = [
        param(
            _axis_param(name), str, AXIS_DEFAULTS.get(name, str(AXES[name].default)), help=AXES[name].metadata["help"]
        )
        for name in SWEPT
    ]
    sweep = [
        param(
            "scheduler",
            str,
            "local",
            help="Where the runs go: local (this machine; simulated nodes with --nodes) or "
            "slurm (job steps over the allocation this command runs in: real nodes; docs/slurm.md).",
        ),
        param(
            "slurm_launch",
            str,
            "usual",
            help="With --scheduler slurm: usual (each backend's usual launcher in its "
            "Slurm form) or srun (one srun task per process, for the backends srun starts: ddp).",
        ),
        param("threads", int | None, None, help="Threads per process (default: a node's CPUs / its processes)."),
        param(
            "repeats",
            int,
            1,
            help="Rounds: every configuration once per round; medians, intervals and verdicts over them.",
        ),
        param("order_seed", int, 0, help="Seed of the shuffled order of each round (recorded)."),
        param("run_timeout_s", int, 900, help="Per-run timeout; the run is killed and marked failed."),
        param("extra", str, "", help="Extra run.py options, quoted, e.g. '--precision bf16'."),
    ]
    forwarded = run_options(FORWARDED, optional=True)
    return [*own, *axes, *sweep, *forwarded]


def compare(values: dict) -> None:
    from distbench.sweep.check import check_sweep
    from distbench.sweep.executor import executor_for
    from distbench.sweep.plan import axis_values, plan_runs, round_orders
    from distbench.sweep.runner import RESULTS, Sweep, run_sweep

    out, repeats, order_seed = values.pop("out"), values.pop("repeats"), values.pop("order_seed")
    threads, timeout_s, extra = values.pop("threads"), values.pop("run_timeout_s"), values.pop("extra")
    axes = axis_values({name: values.pop(_axis_param(name)) for name in SWEPT})
    run_values = {name: values[name] for name in FORWARDED}
    given = {**run_values, **_extra_values(extra)}  # what every run gets: --extra comes last, and wins
    _check(out / RESULTS, threads, repeats, given)
    executor = executor_for(values.pop("scheduler"), values.pop("slurm_launch"))
    task = given["task"] or DEFAULTS["task"]
    planned = plan_runs(_task_name(task), axes, threads, executor.cpus_per_node)
    # every configuration before the first launch; last: a shaped link re-runs this command in a private namespace
    check_sweep([p.config for p in planned], {**given, "task": task}, executor)
    base_args = ["--task", task, *to_args({**run_values, "task": None}), "--no-progress", *shlex.split(extra)]
    sweep = Sweep(out, _task_name(task), base_args, planned, round_orders(len(planned), repeats, order_seed), timeout_s)
    out.mkdir(parents=True, exist_ok=True)
    command_line = "python run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    from distbench.training.reporter import write_json

    write_json(out / "sweep.json", sweep.describe(command_line, repeats, order_seed), indent=2)
    t0 = time.time()
    try:
        records = run_sweep(sweep, executor)
    except KeyboardInterrupt:
        print(f"interrupted: the current run was stopped; records so far are in {out / RESULTS}", file=sys.stderr)
        _write_report(out)
        raise typer.Exit(130) from None
    print(f"sweep done in {time.time() - t0:.0f} s", file=sys.stderr)
    report_md = _write_report(out)
    print(report_md.split("## Environment")[0].rstrip())
    print(f"\nreport: {out / 'report.md'} (plots, summary.csv and {RESULTS} beside it)")
    exit_if_failed(sum(r["status"] != "ok" for r in records), len(records), str(out / "report.md"))


def exit_if_failed(failed: int, total: int, where: str) -> None:
    """A sweep in which any run failed exits 1, once its report is written, saying how many failed and where their
    causes are: its exit status tells the truth (bad input, refused before any launch, is 2)."""
    if failed:
        print(f"{failed} of {total} run{'s' if total > 1 else ''} failed: the causes are in {where}", file=sys.stderr)
        raise typer.Exit(1)


def _extra_values(extra: str) -> dict:
    """The run options --extra gives, as RunConfig's fields, read by run.py's own parser: a bad one is one line before
    any run, and so is one the sweep sets for each run (in --extra it would override the configuration unseen)."""
    from distbench.cli.train import given_options

    try:
        given = given_options(shlex.split(extra))
    except (ValueError, UserError) as e:  # an unclosed quote (shlex), an option run.py has not
        raise UserError(f"--extra {extra!r}: {e}") from None
    for name in given:
        if FIELDS[name].metadata["sweep"] == AXIS:
            raise UserError(f"--extra {flag(name)}: give it as compare's {AXES[name].metadata['option'] or flag(name)}")
        if FIELDS[name].metadata["sweep"] == SET:
            raise UserError(f"--extra {flag(name)}: the sweep sets it for each run")
    return given


def _check(results: Path, threads: int | None, repeats: int, run_values: dict) -> None:
    """The sweep's options that no run would catch before it starts, and the own checks of each option every run gets
    (forwarded or in --extra): one line each, before any run."""
    if (error := POSITIVE.error("--threads", threads)) is not None:
        raise UserError(error)
    if (error := POSITIVE.error("--repeats", repeats)) is not None:
        raise UserError(error)
    for name, value in run_values.items():
        for check in FIELDS[name].metadata["checks"]:
            if (error := check.error(flag(name), value)) is not None:
                raise UserError(error)
    check_dir_option("data_dir", run_values.get("data_dir"))
    if results.exists():
        raise UserError(
            f"{results.parent} already holds a sweep ({results.name}); choose another --out (nothing is overwritten)"
        )


def _task_name(spec: str) -> str:
    """The name a task's records carry (a user's task: its `name`, else its class name); a task that cannot be
    loaded is one line before any run."""
    from distbench.tasks import task_class

    cls = task_class(spec)
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) else cls.__name__


def _write_report(out: Path) -> str:
    from distbench.sweep.report import write_report

    return write_report([out], out)


def simulate(
    ctx: typer.Context,
    backend: Annotated[str, typer.Option(help="ddp, accelerate or horovod.")],
    nodes: Annotated[int, typer.Option(help="Simulated nodes, each on its own share of the cores.")] = 2,
    nprocs: Annotated[int, typer.Option(help="Processes per node.")] = 1,
    link_rate: Annotated[str, typer.Option(help="Rate of the shaped link, e.g. 1gbit or 100mbit.")] = link.UNSHAPED,
    link_mode: Annotated[
        str, typer.Option(help="shared (one bucket on loopback, a hub) or per-node (a NIC per node on a switch).")
    ] = link.MODES[0],
    run_timeout_s: Annotated[int, typer.Option(help="Stop the job after this long.")] = 3600,
) -> None:
    from distbench.sweep.configuration import SweepConfig
    from distbench.sweep.executor import LocalExecutor

    if backend == REFERENCE or get_spec(backend).launchers[0].name == "python":
        raise UserError(f"--backend {backend} runs one process; simulate a distributed backend")
    if nodes <= 0 or nprocs <= 0:
        raise UserError("--nodes and --nprocs must be positive")
    train_args = [a for a in ctx.args if a != "--"]
    if "--backend" in train_args:
        raise UserError("give --backend before --, as simulate's own option")
    link.parse_rate(link_rate)
    link.check_mode(link_mode)
    config = SweepConfig(
        backend=backend, world_size=nodes * nprocs, nodes=nodes, link_rate=link_rate, link_mode=link_mode
    )
    executor = LocalExecutor()
    executor.check([config])
    try:
        code = executor.run_attached(config, train_args, run_timeout_s)
    except subprocess.TimeoutExpired:
        raise UserError(f"the job ran past --run-timeout-s {run_timeout_s} and was stopped") from None
    said = f"{backend} as {nodes} node(s) x {nprocs} process(es), {config.link_said()}"
    print(f"simulated {said}: {'done' if code == 0 else f'exit code {code}'}", file=sys.stderr)
    raise typer.Exit(code)


def report(
    dirs: Annotated[list[Path], typer.Argument(help="Folders written by `run.py compare`.")],
    out: Annotated[Path | None, typer.Option(help="Where to write (default: the first folder).")] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(help="An older sweep folder: each configuration of DIRS gets a verdict against the same one."),
    ] = None,
    allow_different: Annotated[
        bool,
        typer.Option(
            "--allow-different",
            help="Compare with --baseline even when the sweeps differ in task, dataset, steps, batch or device.",
        ),
    ] = False,
) -> None:
    from distbench.sweep.report import write_report
    from distbench.sweep.runner import RESULTS

    for d in [*dirs, *([baseline] if baseline is not None else [])]:
        if not (d / RESULTS).is_file():
            raise UserError(f"{d} holds no {RESULTS} (was it written by `run.py compare`?)")
    built_by = "python run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    print(write_report(dirs, out or dirs[0], built_by, baseline, allow_different))


def slurm_script(
    ctx: typer.Context,
    out: Annotated[
        Path, typer.Option(help="The sweep's output folder, on a filesystem every node sees (relative: to --workdir).")
    ],
    nodes: Annotated[int, typer.Option(help="Nodes of the allocation; the sweep runs on all of them.")] = 2,
    nprocs: Annotated[int | None, typer.Option(help="Processes per node [default: 1; one per GPU].")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node: one process each, NCCL.")] = None,
    cpus_per_task: Annotated[int | None, typer.Option(help="CPUs per process.")] = None,
    partition: Annotated[str | None, typer.Option(help="Slurm partition.")] = None,
    time: Annotated[
        str | None, typer.Option("--time", help="Time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS).")
    ] = None,
    job_name: Annotated[str, typer.Option(help="The job's name.")] = "distbench",
    workdir: Annotated[
        Path | None,
        typer.Option(help="The distbench checkout the job runs in [default: the directory sbatch is called in]."),
    ] = None,
    venv: Annotated[
        Path, typer.Option(help="The Python environment on the cluster (relative: to the workdir).")
    ] = Path(".venv"),
    script: Annotated[Path | None, typer.Option(help="Write the script here (default: print it).")] = None,
    submit: Annotated[bool, typer.Option(help="Submit it with sbatch (needs --script).")] = False,
) -> None:
    from pathlib import PurePosixPath

    from distbench.sweep.sbatch import Place, Request, warn_node_local
    from distbench.sweep.sbatch import script as write
    from distbench.sweep.sbatch import submit as sbatch

    compare_args = [a for a in ctx.args if a != "--"]
    for own in ("--nodes", "--nprocs", "--out", "--scheduler"):
        if own in compare_args:
            raise UserError(f"give {own} as slurm-script's own option, before --")
    request = Request(nodes, nprocs, gpus_per_node, cpus_per_task, partition, time, job_name)
    place = Place(PurePosixPath(out), workdir and PurePosixPath(workdir), PurePosixPath(venv))
    text = write(request, place, compare_args)
    if submit and script is None:
        raise UserError("--submit needs --script FILE (the script sbatch runs)")
    warn_node_local(place)
    if script is None:
        print(text, end="")
        return
    script.write_text(text)
    script.chmod(0o755)
    if submit:
        print(f"submitted job {sbatch(script)}: {script}")


def sweep_app() -> typer.Typer:
    app = new_app()
    command(
        app,
        "compare",
        compare_params(),
        compare,
        help="Run every backend at several world sizes with its real launcher and report.",
    )
    app.command(
        help="Run one training job as simulated nodes, each on its own cores, optionally over a shaped link; "
        "the options after -- are run.py's training options (--output says where the record goes).",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(simulate)
    app.command(help="Rebuild the report (summary.csv, report.md, plots) from compare folders.")(report)
    app.command(
        name="slurm-script",
        help="Write an sbatch script that runs a compare sweep on a Slurm cluster (the "
        "options after -- are compare's); docs/slurm.md.",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(slurm_script)
    return app
