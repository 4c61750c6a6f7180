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


def simulate(backend: str, placement: Placement, train_args: list[str], timeout_s: int, given: dict) -> int:
    """Run `run.py --backend BACKEND TRAIN_ARGS` placed as `placement` says (`given`: the run options TRAIN_ARGS
    give, as run.py's parser reads them); returns the job's exit code."""
    if not get_spec(backend).distributed:
        raise UserError(f"--backend {backend} runs one process; simulate a distributed backend")
    config = SweepConfig.placed(backend, placement)
    executor = LocalExecutor()
    executor.check([config], emulated=given.get("emulate") is not None, dilation=given.get("dilation") or 1.0)
    try:
        code = executor.run_attached(config, train_args, timeout_s)
    except subprocess.TimeoutExpired:
        raise UserError(f"the job ran past --run-timeout-s {timeout_s} and was stopped") from None
    said = f"{backend} as {placement.nodes} node(s) x {placement.nprocs} process(es), {config.link_said()}"
    print(f"simulated {said}: {'done' if code == 0 else f'exit code {code}'}", file=sys.stderr)
    return code
