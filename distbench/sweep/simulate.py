"""`run.py simulate`: one training job as simulated nodes on this machine, optionally over a shaped link, attached
to the terminal (no sweep, no report: the job's own output and record)."""

from __future__ import annotations

import subprocess
import sys

from distbench.backends import get_spec
from distbench.errors import UserError
from distbench.launching.placement import Placement
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.executor import LocalExecutor


def simulate(backend: str, placement: Placement, train_args: list[str], timeout_s: int) -> int:
    """Run `run.py --backend BACKEND TRAIN_ARGS` placed as `placement` says; returns the job's exit code."""
    if not get_spec(backend).distributed:
        raise UserError(f"--backend {backend} runs one process; simulate a distributed backend")
    config = SweepConfig.placed(backend, placement)
    executor = LocalExecutor()
    executor.check([config], emulated=_given("--emulate", train_args) is not None, dilation=_dilation(train_args))
    try:
        code = executor.run_attached(config, train_args, timeout_s)
    except subprocess.TimeoutExpired:
        raise UserError(f"the job ran past --run-timeout-s {timeout_s} and was stopped") from None
    said = f"{backend} as {placement.nodes} node(s) x {placement.nprocs} process(es), {config.link_said()}"
    print(f"simulated {said}: {'done' if code == 0 else f'exit code {code}'}", file=sys.stderr)
    return code


def _given(flag: str, args: list[str]) -> str | None:
    """The value of `flag` among the job's own options (FLAG VALUE or FLAG=VALUE), or None."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _dilation(args: list[str]) -> float:
    """--dilation K among the job's options (its links are shaped K times slower); the run checks the value."""
    value = _given("--dilation", args)
    try:
        return float(value) if value is not None else 1.0
    except ValueError:
        raise UserError(f"--dilation {value!r} is not a number") from None
