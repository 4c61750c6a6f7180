"""`run.py [options]`: train one task under one backend. Its options are RunConfig's fields, each as declared."""

from __future__ import annotations

from enum import Enum

import click
import typer

from distbench.cli import COMMANDS
from distbench.cli.declared import command, new_app, run_options
from distbench.config import FIELDS, RunConfig
from distbench.errors import UserError
from distbench.launching.commands import launch_help


def commands_help() -> str:
    """Every other command of run.py, one line each (a \\b block: click keeps it as it is)."""
    width = max(map(len, COMMANDS)) + 1
    lines = [f"  {name:<{width}} {cmd.says}" for name, cmd in COMMANDS.items()]
    return "\n".join(["Commands (`run.py COMMAND --help` for each):", "", "\b", *lines, ""])


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
        epilog=commands_help() + "\n" + launch_help(),
        help="Train one task under one data-parallel backend and write a results record.",
    )
    return app


def given_options(args: list[str]) -> dict:
    """The training options `args` give (only those given), as RunConfig's fields with their declared types, read by
    run.py's own parser: one it does not take, or a bad value, is a UserError."""
    cmd = typer.main.get_command(train_app())
    try:
        ctx = cmd.make_context("run.py", list(args))
    except (typer.TyperException, click.ClickException) as e:  # typer >= 0.20 vendors click (see cli.invoke)
        raise UserError(" ".join(e.format_message().split())) from None
    # the source's name: the same enum in click and in typer's vendored copy
    given = {name: v for name, v in ctx.params.items() if ctx.get_parameter_source(name).name == "COMMANDLINE"}
    return {name: v.value if isinstance(v, Enum) else v for name, v in given.items()}
