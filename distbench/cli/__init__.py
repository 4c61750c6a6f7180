"""Command line: `run.py [train options]`, `run.py compare ...`, `run.py simulate ...`, `run.py report DIR`,
`run.py check-task TASK`, `run.py slurm-script ...`.

The options of a run are RunConfig's fields (distbench/config.py) and those of a sweep's axes SweepConfig's
(distbench/sweep/configuration.py): the commands are built from those declarations (declared.py). Bad input is one
line on stderr and exit code 2. Each command's module is imported only when that command runs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import click
import typer

from distbench.errors import UserError

SWEEP_COMMANDS = ("compare", "report", "simulate", "slurm-script")
SCALING_COMMANDS = ("commbench", "project")


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
        from distbench.launching import launch

        if launch.current().is_main:
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
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"message": {"message": line, "extraInfo": {"timestamp": str(int(time.time()))}}}, f)
    except OSError:
        pass  # the summary is then torchrun's default; the line is on stderr all the same


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tokenizers' threads fight torch's for 2 cores
    if argv and argv[0] == "check-task":
        from distbench.cli.checktask import check_task_app

        return invoke(check_task_app(), argv[1:], "run.py check-task")
    if argv and argv[0] in (*SCALING_COMMANDS, *SWEEP_COMMANDS):
        # a driver stopped with SIGTERM (kill, a scheduler's time limit) cleans up as after Ctrl-C: its runs are
        # stopped, its network namespaces removed, what it measured so far reported
        signal.signal(signal.SIGTERM, _interrupt)
    if argv and argv[0] in SCALING_COMMANDS:
        from distbench.cli.scaling import scaling_app

        return invoke(scaling_app(), argv, "run.py")
    if argv and argv[0] in SWEEP_COMMANDS:
        from distbench.cli.sweep import sweep_app

        return invoke(sweep_app(), argv, "run.py")
    from distbench.cli.train import train_app

    return invoke(train_app(), argv, "run.py")
