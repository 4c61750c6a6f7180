"""`run.py check-task TASK`: does a task keep the fairness contract under every backend?
(distbench/sweep/checktask.py)"""

from __future__ import annotations

from pathlib import Path

import typer

from distbench.backends import DISTRIBUTED
from distbench.cli.declared import argument, command, new_app, param


def check_task(values: dict) -> None:
    from distbench.sweep.checktask import check_task as run_checks

    code = run_checks(**values)
    if code:
        raise typer.Exit(code)


def check_task_app() -> typer.Typer:
    app = new_app()
    params = [
        argument("task", str, help="mnist, bert-sentiment, package.module:Class or path/to/file.py:Class."),
        param("steps", int, 20, help="Training steps per run."),
        param("backends", str, ",".join(DISTRIBUTED), help="Distributed backends to check against single."),
        param("seed", int, 0, help="Seed of weights and data order."),
        param("extra", str, "", help="Extra run.py options, quoted, e.g. '--data-dir DIR'."),
        param("run_timeout_s", int, 600, help="Per-run timeout."),
        param("keep", Path | None, None, help="Keep each run's record and log in this folder."),
    ]
    command(
        app,
        "check-task",
        params,
        check_task,
        help="Check that a task keeps the fairness contract: single x1 and every distributed backend x2, dropout off.",
    )
    return app
