"""`run.py slurm-script`: a ready sbatch script for a sweep on a Slurm cluster (docs/slurm.md).

The script asks for the nodes, tasks, CPUs, GPUs, partition and time limit given, then runs `run.py compare
--scheduler slurm` inside its allocation. It names no path of the machine that wrote it: it runs from the directory
sbatch was called in (`$SLURM_SUBMIT_DIR`) or `--workdir`, a checkout of distbench on a filesystem every node sees,
and takes the environment there (`.venv`) or at the `--venv` given. With `--gpus-per-node G` each node runs G
processes, one per GPU, and the libraries take their GPU paths (NCCL).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from distbench.errors import UserError

# Slurm's time limits (sbatch --time): MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS. The leading field is
# unbounded (90 minutes, 48:00:00), the ones after it are not (minutes and seconds below 60, hours below 24 after
# the days).
TIME_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS"
_TIME = re.compile(r"(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?|\d+(?::\d+){0,2})")
# Storage each node has of its own: a sweep's records written there are not on the node the user reads them from.
NODE_LOCAL = (PurePosixPath("/tmp"), PurePosixPath("/var/tmp"), PurePosixPath("/dev/shm"))
DEFAULT_VENV = PurePosixPath(".venv")


def check_time(value: str) -> None:
    """Refuse, in one line, a time limit Slurm would not read as the user meant it."""
    form = f"--time {value!r}: Slurm's forms are {TIME_FORMS}"
    match = _TIME.fullmatch(value)
    if match is None:
        raise UserError(form)
    if match["days"] is not None:
        limits = [("hours", match["dh"], 24), ("minutes", match["dm"], 60), ("seconds", match["ds"], 60)]
    else:  # MM, MM:SS or HH:MM:SS: every field after the first is minutes or seconds
        limits = [("minutes or seconds", field, 60) for field in value.split(":")[1:]]
    for name, field, limit in limits:
        if field is not None and int(field) >= limit:
            raise UserError(f"{form} ({name} below {limit}, got {field})")


@dataclass(frozen=True)
class Request:
    """What the job asks Slurm for."""

    nodes: int
    nprocs: int | None  # processes per node; None: not given (one, or one per GPU)
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
        if self.gpus_per_node is not None and self.nprocs not in (None, self.gpus_per_node):
            raise UserError(
                f"--nprocs {self.nprocs} with --gpus-per-node {self.gpus_per_node}: with GPUs each node runs one "
                "process per GPU; leave out --nprocs"
            )
        if self.time is not None:
            check_time(self.time)

    @property
    def processes(self) -> int:
        return self.gpus_per_node or self.nprocs or 1

    def directives(self, log: PurePosixPath, workdir: PurePosixPath | None) -> list[str]:
        asked = {
            "job-name": self.job_name,
            "nodes": self.nodes,
            "ntasks-per-node": self.processes,
            "cpus-per-task": self.cpus_per_task,
            "gpus-per-node": self.gpus_per_node,
            "partition": self.partition,
            "time": self.time,
            "chdir": workdir,  # where the job starts: a relative --output (the log) is read from there too
            "output": log,
        }
        return [f"#SBATCH --{key}={value}" for key, value in asked.items() if value is not None]


@dataclass(frozen=True)
class Place:
    """Where the job runs and what it runs with, as the user gave them: relative paths are read on the cluster, from
    the job's directory, never resolved on the machine that writes the script."""

    out: PurePosixPath
    workdir: PurePosixPath | None = None  # None: the directory sbatch is called in
    venv: PurePosixPath = DEFAULT_VENV

    def lines(self) -> list[str]:
        """cd into the job's directory, check the environment is there, put its bin/ first on PATH (the launchers:
        torchrun, accelerate, horovodrun)."""
        venv = shlex.quote(str(self.venv))
        venv = venv if self.venv.is_absolute() else f'"$PWD"/{venv}'
        # with --workdir, #SBATCH --chdir starts the job there (a relative one read from where sbatch is called): a
        # cd of its own would look for it again inside it
        where, cd = ("--workdir, #SBATCH --chdir", []) if self.workdir is not None else ("", ['cd "$SLURM_SUBMIT_DIR"'])
        where = where or "the directory sbatch was called in"
        return [
            f"# a checkout of distbench on a filesystem every node sees ({where}); the records are written there too",
            *cd,
            f'[ -x {venv}/bin/python ] || {{ echo "error: no Python environment at" {venv} "(--venv)" >&2; exit 2; }}',
            f"export PATH={venv}/bin:$PATH",
        ]

    def node_local(self) -> bool:
        """Whether the records would land on storage of the node that writes them. A relative --out is read from
        --workdir, or else from here (where the user will most likely call sbatch)."""
        out = PurePosixPath(Path.cwd()) / (self.workdir or "") / self.out  # an absolute part starts afresh
        out = PurePosixPath(os.path.normpath(out))  # a/../b: b
        return any(out == local or local in out.parents for local in NODE_LOCAL)


def script(request: Request, place: Place, compare_args: list[str]) -> str:
    """The sbatch script: the request, then the sweep as job steps over the allocation."""
    request.check()
    compare = ["python", "run.py", "compare", "--scheduler", "slurm", "--nodes", str(request.nodes)]
    compare += ["--nprocs", str(request.processes), "--out", str(place.out), *compare_args]
    return "\n".join(
        [
            "#!/bin/bash",
            f"# by `run.py slurm-script` (distbench): {request.nodes} node(s) x {request.processes} process(es)",
            *request.directives(place.out.parent / f"{place.out.name}-slurm-%j.log", place.workdir),
            "set -euo pipefail",
            *place.lines(),
            " ".join(map(shlex.quote, compare)),
            "",
        ]
    )


def warn_node_local(place: Place) -> None:
    """One line on stderr when --out is node-local storage: the script is still written (a single node's job may
    want it so)."""
    if place.node_local():
        print(
            f"warning: --out {place.out} is on node-local storage ({', '.join(map(str, NODE_LOCAL))}): the records "
            "stay on the node that wrote them; give a folder every node sees",
            file=sys.stderr,
            flush=True,
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
