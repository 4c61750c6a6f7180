"""Typer commands built from declarations: each declared field is one option, with its flag, type, default and help,
so that the declaration is the command line (after torchtitan's config-as-CLI)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Annotated

import typer

from distbench.config import FIELDS, TASK_DEFAULTED, GradCompression, Precision, RunConfig


def backend_choices() -> type[Enum]:
    """The registry's backend names as a typer choice."""
    from distbench.backends import NAMES

    return Enum("BackendName", {name: name for name in NAMES}, type=str)


def choices() -> dict[str, type[Enum]]:
    """The options whose values are a closed set, as typer choices."""
    return {"backend": backend_choices(), "precision": Precision, "grad_compression": GradCompression}


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def task_defaults_help(name: str) -> str:
    """What each built-in task sets an option to when the user does not: " (default: mnist 5, bert-sentiment 1)"."""
    from distbench.tasks import GENERIC_DEFAULTS, TASKS, task_class

    unset = FIELDS[name].metadata["unset"]
    said = []
    for task in TASKS:
        value = {**GENERIC_DEFAULTS, **getattr(task_class(task), "defaults", {})}.get(name)
        said.append(f"{task} {unset if value is None else _shown(value)}")
    return f" (default: {', '.join(said)}; your task: its own)"


def run_options(
    names: Iterable[str], *, optional: bool = False, defaults: dict | None = None
) -> list[inspect.Parameter]:
    """RunConfig's fields `names` as typer options. `optional`: each defaults to None ("not given"), as when a sweep
    forwards only what it was given."""
    hints = typing.get_type_hints(RunConfig)
    closed = choices()
    params = []
    for name in names:
        meta = FIELDS[name].metadata
        annotation = closed.get(name, hints[name])
        default = None if optional else (defaults or {}).get(name, FIELDS[name].default)
        if name in closed and default is not None:
            default = closed[name](default)
        if optional:
            annotation = annotation | None
        help_text = meta["help"] + (task_defaults_help(name) if name in TASK_DEFAULTED and not optional else "")
        decls = [meta["flag"]] if meta["flag"] else []
        params.append(_param(name, annotation, default, typer.Option(*decls, help=help_text)))
    return params


def _param(name: str, annotation, default, info) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, info]
    )


def param(name: str, annotation, default=inspect.Parameter.empty, *decls: str, help: str = "") -> inspect.Parameter:
    """One option declared where it is used (an option of a command's own, not of a run)."""
    return _param(name, annotation, default, typer.Option(*decls, help=help))


def argument(name: str, annotation, help: str = "") -> inspect.Parameter:
    """A positional argument of a command's own."""
    return inspect.Parameter(
        name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[annotation, typer.Argument(help=help)]
    )


def command(
    app: typer.Typer, name: str, params: list[inspect.Parameter], body: Callable[[dict], object], **settings
) -> None:
    """Add command `name` to `app`, taking `params`; `body` gets the values given, keyed by parameter name, with
    choices as their plain values."""

    def handler(**values):
        return body({k: v.value if isinstance(v, Enum) else v for k, v in values.items()})

    handler.__signature__ = inspect.Signature(params)
    handler.__annotations__ = {p.name: p.annotation for p in params}
    handler.__name__ = name.replace("-", "_")
    app.command(name=name, **settings)(handler)


def new_app() -> typer.Typer:
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
