"""`run.py slurm-script`: a ready sbatch script for a sweep on a Slurm cluster (docs/slurm.md).

The script asks for the nodes, tasks, CPUs, GPUs, partition and time limit given, then runs `run.py compare
--scheduler slurm` inside its allocation, from this checkout and with this checkout's environment (both must be on a
filesystem every node sees: the records too). With `--gpus-per-node G` each node runs G processes, one per GPU,
and the libraries take their GPU paths (NCCL).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from distbench.errors import UserError

ROOT = Path(__file__).resolve().parents[2]  # this checkout


@dataclass(frozen=True)
class Request:
    """What the job asks Slurm for."""

    nodes: int
    nprocs: int  # processes per node
    gpus_per_node: int | None
    cpus_per_task: int | None
    partition: str | None
    time: str | None
    job_name: str

    def check(self) -> None:
        for flag, value in (
            ("--nodes", self.nodes),
            ("--nprocs", self.nprocs),
            ("--gpus-per-node", self.gpus_per_node),
            ("--cpus-per-task", self.cpus_per_task),
        ):
            if value is not None and value <= 0:
                raise UserError(f"{flag} must be positive, got {value}")
        if self.time is not None and not re.fullmatch(r"(\d+-)?\d+(:\d\d){0,2}", self.time):
            raise UserError(f"--time {self.time!r}: Slurm's forms are MINUTES, HH:MM:SS or DAYS-HH:MM:SS")

    @property
    def processes(self) -> int:
        return self.gpus_per_node or self.nprocs

    def directives(self, log: Path) -> list[str]:
        asked = {
            "job-name": self.job_name,
            "nodes": self.nodes,
            "ntasks-per-node": self.processes,
            "cpus-per-task": self.cpus_per_task,
            "gpus-per-node": self.gpus_per_node,
            "partition": self.partition,
            "time": self.time,
            "output": log,
        }
        return [f"#SBATCH --{key}={value}" for key, value in asked.items() if value is not None]


def script(request: Request, out: Path, compare_args: list[str], python: str = sys.executable) -> str:
    """The sbatch script: the request, then the sweep as job steps over the allocation."""
    request.check()
    out = out.resolve()
    compare = [
        python,
        "run.py",
        "compare",
        "--scheduler",
        "slurm",
        "--nodes",
        str(request.nodes),
        "--nprocs",
        str(request.processes),
        "--out",
        str(out),
        *compare_args,
    ]
    return "\n".join(
        [
            "#!/bin/bash",
            f"# by `run.py slurm-script` (distbench): {request.nodes} node(s) x {request.processes} process(es)",
            *request.directives(out.parent / f"{out.name}-slurm-%j.log"),
            "set -euo pipefail",
            "# this checkout and its environment, on a filesystem every node sees (the records are written there too)",
            f"cd {shlex.quote(str(ROOT))}",
            f"export PATH={shlex.quote(str(Path(python).parent))}:$PATH",
            " ".join(map(shlex.quote, compare)),
            "",
        ]
    )


def submit(path: Path) -> str:
    """sbatch the script; the job's id, or Slurm's refusal as one line."""
    try:
        proc = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, timeout=120)
    except FileNotFoundError as e:
        raise UserError("--submit needs Slurm's sbatch, which is not installed here") from e
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split()).removeprefix("sbatch: error: ")
        raise UserError(f"sbatch refused the job: {said}")
    return proc.stdout.strip().split(";")[0]
