"""`run.py [options]`: train one task under one backend. Its options are RunConfig's fields, each as declared."""

from __future__ import annotations

import typer

from distbench.backends import launch_help
from distbench.cli.declared import command, new_app, run_options
from distbench.config import FIELDS, RunConfig

LAUNCH_HELP = (
    launch_help()
    + "\nOther commands: `run.py compare --help` (run the backend x world-size matrix; --nodes, --link-rate), "
    "`run.py simulate --help` (one job as simulated nodes, optionally over a shaped link), `run.py report DIR`, "
    "`run.py check-task TASK` (does a task, e.g. your own, keep the fairness contract under every backend?).\n"
)


def train(values: dict) -> None:
    from distbench.training.loop import run

    run(RunConfig(**values))


def train_app() -> typer.Typer:
    app = new_app()
    command(
        app,
        "train",
        run_options(FIELDS),
        train,
        epilog=LAUNCH_HELP,
        help="Train one task under one data-parallel backend and write a results record.",
    )
    return app
