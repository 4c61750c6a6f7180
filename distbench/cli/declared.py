"""Typer commands built from declarations: each declared field is one option, with its flag, type, default and help,
so that the declaration is the command line (after torchtitan's config-as-CLI)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Annotated

import typer

from distbench.config import FIELDS, TASK_DEFAULTED, RunConfig


def backend_choices() -> type[Enum]:
    """The registry's backend names as a typer choice."""
    from distbench.backends import NAMES

    return Enum("BackendName", {name: name for name in NAMES}, type=str)


def choices() -> dict[str, type[Enum]]:
    """The options whose values are a closed set, as typer choices."""
    declared = {name: f.metadata["choices"] for name, f in FIELDS.items() if f.metadata["choices"] is not None}
    return {"backend": backend_choices(), **declared}


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


def placement_params(
    names: Iterable[str], *, listed: bool = False, defaults: dict | None = None, notes: dict | None = None
) -> list[inspect.Parameter]:
    """Placement options (launching/placement.PLACEMENT) as typer options, each as declared: one value each, or
    (`listed`) a comma-separated list each, as compare's axes take them. `defaults` and `notes` (a sentence added to
    the help) are a command's own."""
    from distbench.launching.placement import PLACEMENT

    defaults, notes = defaults or {}, notes or {}
    params = []
    for name in names:
        declared = PLACEMENT[name]
        default = defaults.get(name, declared.default)
        annotation = str if listed else declared.type
        if default is None:
            annotation = annotation | None
        help_text = ("Comma-separated, a sweep axis. " if listed else "") + declared.help + " " + notes.get(name, "")
        params.append(param(name, annotation, default, declared.flag, help=help_text.strip()))
    return params


def _param(name: str, annotation, default, info) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, info]
    )


def param(name: str, annotation, default=inspect.Parameter.empty, *decls: str, help: str = "") -> inspect.Parameter:
    """One option declared where it is used (an option of a command's own, not of a run)."""
    return _param(name, annotation, default, typer.Option(*decls, help=help))


def argument(name: str, annotation, help: str = "", default=inspect.Parameter.empty) -> inspect.Parameter:
    """A positional argument of a command's own (optional where it has a default)."""
    return inspect.Parameter(
        name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=default,
        annotation=Annotated[annotation, typer.Argument(help=help)],
    )


EXTRA = "extra_args"  # what a command that passes options on (after --) gets them as


def command(
    app: typer.Typer,
    name: str,
    params: list[inspect.Parameter],
    body: Callable[[dict], object],
    *,
    passes_on: bool = False,
    **settings,
) -> None:
    """Add command `name` to `app`, taking `params`; `body` gets the values given, keyed by parameter name, with
    choices as their plain values. `passes_on`: the command takes options it does not know (after --) and passes
    them on; the body gets them as values[EXTRA]."""

    def handler(ctx: typer.Context, **values):
        values = {k: v.value if isinstance(v, Enum) else v for k, v in values.items()}
        if passes_on:
            values[EXTRA] = [a for a in ctx.args if a != "--"]
        return body(values)

    if passes_on:
        settings["context_settings"] = {"allow_extra_args": True, "ignore_unknown_options": True}
    context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
    params = [context, *params]
    handler.__signature__ = inspect.Signature(params)
    handler.__annotations__ = {p.name: p.annotation for p in params}
    handler.__name__ = name.replace("-", "_")
    app.command(name=name, **settings)(handler)


def new_app() -> typer.Typer:
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
