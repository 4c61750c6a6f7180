"""Command line: `run.py [train options]` trains, `run.py COMMAND ...` runs one of COMMANDS (compare, simulate,
report, check-task, commbench, project, atlas, profile, slurm-script).

The options of a run are RunConfig's fields (distbench/config.py) and those of a sweep's axes SweepConfig's
(distbench/sweep/configuration.py): the commands are built from those declarations (declared.py). Bad input is one
line on stderr and exit code 2. Each command's module is imported only when that command runs.
"""

from __future__ import annotations

import difflib
import importlib
import os
import signal
import sys
import time
from dataclasses import dataclass

import click
import typer

from distbench.errors import UserError


@dataclass(frozen=True)
class Command:
    """A command of run.py beside training: the typer app that holds it and its line in `run.py --help`."""

    app: str  # "module:function" building the app
    says: str
    grouped: bool = True  # the app is a group of commands, called with the command's name (check-task's is not)

    def invoke(self, argv: list[str]) -> int:
        module, function = self.app.split(":")
        app = getattr(importlib.import_module(module), function)()
        return invoke(app, argv, "run.py") if self.grouped else invoke(app, argv[1:], f"run.py {argv[0]}")


_SWEEP, _PLANNING = "distbench.cli.sweep:sweep_app", "distbench.cli.planning:planning_app"
# every command, in the order `run.py --help` lists them (the one place their names are spelled for dispatch, the
# help and the suggestion for a misspelled one)
COMMANDS = {
    "compare": Command(
        _SWEEP, "run the backend x world-size matrix with the real launchers and report (--nodes, --link-rate)"
    ),
    "simulate": Command(_SWEEP, "one training job as simulated nodes, optionally over a shaped link"),
    "report": Command(_SWEEP, "rebuild the report of compare folders from their records (--baseline OLD)"),
    "check-task": Command(
        "distbench.cli.checktask:check_task_app",
        "does a task, e.g. your own, keep the fairness contract under every backend?",
        grouped=False,
    ),
    "commbench": Command(
        _PLANNING, "time each library's own all-reduce over message sizes, with a latency-bandwidth fit"
    ),
    "project": Command(_PLANNING, "predict each library's step time at a planned scale from a sweep and a commbench"),
    "atlas": Command(_PLANNING, "project over a grid of node counts x link rates: who is fastest where, and what link"),
    "profile": Command(
        "distbench.cli.emulation:profile_app",
        "time each module of a task's step, forward and backward, on this machine's device (one JSON file)",
        grouped=False,
    ),
    "slurm-script": Command(_SWEEP, "write an sbatch script that runs a compare sweep on a Slurm cluster"),
}


def unknown_command(word: str) -> str:
    """The line for a first word that is no command (training takes options only): the closest command, if any."""
    close = difflib.get_close_matches(word, COMMANDS, n=1)
    if close:
        return f"unknown command {word!r} (did you mean {close[0]!r}?)"
    return f"unknown command {word!r}; the commands: {', '.join(COMMANDS)} (training takes options: run.py --help)"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def invoke(app: typer.Typer, args: list[str], prog: str) -> int:
    # typer >= 0.20 vendors click: its exceptions are typer's, not the click package's.
    exit_types = (typer.Exit, click.exceptions.Exit)
    usage_types = (typer.TyperException, click.ClickException)
    try:
        # without standalone mode, click returns an Exit's code (e.g. 130 after Ctrl-C) instead of raising
        rv = app(args=args, prog_name=prog, standalone_mode=False)
    except exit_types as e:  # --help
        return e.exit_code
    except (typer.Abort, click.exceptions.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        return 130
    except usage_types as e:  # bad option or value: one line, not a usage box
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        return 2
    except UserError as e:
        from distbench import process

        if process.current().is_main:
            print(f"error: {e}", file=sys.stderr, flush=True)
        else:
            # Every rank usually meets the same bad input at once. A launcher tears the job down when the first
            # process exits (horovodrun kills the rest), which could cut the main process's line short; the
            # others leave a moment later.
            time.sleep(2)
        _record_for_torchrun(f"error: {e}")
        return e.exit_code
    return rv if isinstance(rv, int) else 0


def _record_for_torchrun(line: str) -> None:
    """torchrun (and accelerate launch, which runs its agent) reads a failed worker's error file
    (TORCHELASTIC_ERROR_FILE) for the root cause of its failure summary; without one it says only
    "To enable traceback see ...". The message goes there without a traceback: it is the one line."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        from pathlib import Path

        from distbench.records import write_json

        write_json(Path(path), {"message": {"message": line, "extraInfo": {"timestamp": str(int(time.time()))}}})
    except OSError:
        pass  # the summary is then torchrun's default; the line is on stderr all the same


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tokenizers' threads fight torch's for 2 cores
    if not argv or argv[0].startswith("-"):  # training: options only, no positional word
        from distbench.cli.train import train_app

        return invoke(train_app(), argv, "run.py")
    if argv[0] not in COMMANDS:
        print(f"error: {unknown_command(argv[0])}", file=sys.stderr)
        return 2
    # a driver stopped with SIGTERM (kill, a scheduler's time limit) cleans up as after Ctrl-C: its runs are
    # stopped, its network namespaces removed, what it measured so far reported
    signal.signal(signal.SIGTERM, _interrupt)
    return COMMANDS[argv[0]].invoke(argv)
