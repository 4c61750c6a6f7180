"""`run.py compare`, `run.py simulate` and `run.py report`.

compare's options are the sweep's own (where it writes, rounds, order seed, timeouts), one per swept axis of
SweepConfig (a comma-separated list each) and every run option a sweep forwards (RunConfig's FORWARD fields), each
as declared; a forwarded option reaches every run only when it is given.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from distbench.backends import DISTRIBUTED, NAMES
from distbench.cli.declared import EXTRA, command, new_app, param, placement_params, run_options
from distbench.config import AXIS, FIELDS, FORWARDED, SET, flag
from distbench.errors import UserError
from distbench.launching.placement import Placement
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
        *placement_params(["scheduler"]),
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
        param(
            "restarts",
            int,
            0,
            help="Continue a run up to N times after a failure, as each library's users do (torchrun's "
            "--max-restarts with a c10d rendezvous, --nnodes 1:N on several nodes; accelerate launch's --max_restarts; "
            "DeepSpeed and Fabric under torchrun: each from its last checkpoint, a folder of its own, every "
            "--checkpoint-every steps; horovod: Horovod Elastic, from its last commit, --commit-every, on 2 nodes or "
            "more; on Slurm, the same launchers' forms there, docs/slurm.md); its record says what a failure "
            "cost (docs/faults.md).",
        ),
        param("extra", str, "", help="Extra run.py options, quoted, e.g. '--precision bf16'."),
    ]
    forwarded = run_options(FORWARDED, optional=True)
    return [*own, *axes, *sweep, *forwarded]


def compare(values: dict) -> None:
    from distbench.sweep.compare import CompareRequest, run

    extra = values.pop("extra")
    request = CompareRequest(
        out=values.pop("out"),
        axes={name: values.pop(_axis_param(name)) for name in SWEPT},
        scheduler=Placement.given(values).scheduler,
        slurm_launch=values.pop("slurm_launch"),
        threads=values.pop("threads"),
        repeats=values.pop("repeats"),
        order_seed=values.pop("order_seed"),
        run_timeout_s=values.pop("run_timeout_s"),
        restarts=values.pop("restarts"),
        forwarded={name: values[name] for name in FORWARDED},
        extra=extra,
        extra_values=_extra_values(extra),
        command_line=command_line(),
    )
    outcome = run(request)
    if outcome.interrupted:
        raise typer.Exit(130)
    exit_if_failed(outcome.failed, outcome.runs, str(outcome.report))


def command_line() -> str:
    """This command as typed, for what it writes (sweep.json, the report)."""
    return "python run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])


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


def simulate_params() -> list:
    own = [param("backend", str, help="A distributed backend: " + ", ".join(DISTRIBUTED) + ".")]
    placed = placement_params(["nodes", "nprocs", "link_rate", "link_mode"], defaults={"nodes": 2})
    return [*own, *placed, param("run_timeout_s", int, 3600, help="Stop the job after this long.")]


def simulate(values: dict) -> None:
    from distbench.sweep.simulate import simulate as run

    train_args = values.pop(EXTRA)
    if "--backend" in train_args:
        raise UserError("give --backend before --, as simulate's own option")
    from distbench.cli.train import given_options

    given = given_options(train_args)  # a bad run option is one line before anything starts
    code = run(values.pop("backend"), Placement.given(values), train_args, values.pop("run_timeout_s"), given)
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
    built_by = command_line()
    print(write_report(dirs, out or dirs[0], built_by, baseline, allow_different))


def slurm_script_params() -> list:
    out = param(
        "out", Path, help="The sweep's output folder, on a filesystem every node sees (relative: to --workdir)."
    )
    placed = placement_params(
        ["nodes", "nprocs"],
        defaults={"nodes": 2, "nprocs": None},
        notes={
            "nodes": "Here: the allocation's; the sweep runs on all of them.",
            "nprocs": "[default: 1; one per GPU]",
        },
    )
    own = [
        param("gpus_per_node", int | None, None, help="GPUs per node: one process each, NCCL."),
        param("cpus_per_task", int | None, None, help="CPUs per process."),
        param("partition", str | None, None, help="Slurm partition."),
        param("time", str | None, None, help="Time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)."),
        param("job_name", str, "distbench", help="The job's name."),
        param(
            "workdir",
            Path | None,
            None,
            help="The distbench checkout the job runs in [default: the directory sbatch is called in].",
        ),
        param("venv", Path, Path(".venv"), help="The Python environment on the cluster (relative: to the workdir)."),
        param("script", Path | None, None, help="Write the script here (default: print it)."),
        param("submit", bool, False, help="Submit it with sbatch (needs --script)."),
    ]
    return [out, *placed, *own]


def slurm_script(values: dict) -> None:
    from pathlib import PurePosixPath

    from distbench.sweep.slurm import Place, Request, write_script

    compare_args = values.pop(EXTRA)
    for own in ("--nodes", "--nprocs", "--out", "--scheduler"):
        if own in compare_args:
            raise UserError(f"give {own} as slurm-script's own option, before --")
    placement = Placement.given(values)
    v = values
    request = Request(
        placement.nodes,
        placement.nprocs,
        v["gpus_per_node"],
        v["cpus_per_task"],
        v["partition"],
        v["time"],
        v["job_name"],
    )
    place = Place(PurePosixPath(v["out"]), v["workdir"] and PurePosixPath(v["workdir"]), PurePosixPath(v["venv"]))
    print(write_script(request, place, compare_args, v["script"], v["submit"]), end="")


def sweep_app() -> typer.Typer:
    app = new_app()
    command(
        app,
        "compare",
        compare_params(),
        compare,
        help="Run every backend at several world sizes with its real launcher and report.",
    )
    command(
        app,
        "simulate",
        simulate_params(),
        simulate,
        passes_on=True,
        help="Run one training job as simulated nodes, each on its own cores, optionally over a shaped link; "
        "the options after -- are run.py's training options (--output says where the record goes).",
    )
    app.command(help="Rebuild the report (summary.csv, report.md, plots) from compare folders.")(report)
    command(
        app,
        "slurm-script",
        slurm_script_params(),
        slurm_script,
        passes_on=True,
        help="Write an sbatch script that runs a compare sweep on a Slurm cluster (the options after -- are "
        "compare's); docs/slurm.md.",
    )
    return app
