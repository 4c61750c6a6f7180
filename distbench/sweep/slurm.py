"""The sweep on Slurm: the executor that runs each configuration as a job step of the allocation it is in
(`run.py compare --scheduler slurm`), and the sbatch script that asks for that allocation (`run.py slurm-script`;
docs/slurm.md).

The executor: every run of a sweep is a job step over the allocation's nodes, each library started the way its users
start it on Slurm (distbench/launching/slurm.py says how), with `--nodes K` real nodes and `--nprocs P` processes on
each. A step has the sweep's per-run timeout; a step that fails or hangs (a task killed, a node lost) is ended with
every process it started on every node (srun --kill-on-bad-exit, then scancel of the step by its name), recorded as
failed, and the sweep goes on; Ctrl-C cancels the running step. The record gains the scheduler's facts: the job, the
step, the nodes' names and addresses, and each rank's node.

The script asks for the nodes, tasks, CPUs, GPUs, partition and time limit given, then runs `run.py compare
--scheduler slurm` inside its allocation. It names no path of the machine that wrote it: it runs from the directory
sbatch was called in (`$SLURM_SUBMIT_DIR`) or `--workdir`, a checkout of distbench on a filesystem every node sees,
and takes the environment there (`.venv`) or at the `--venv` given. With `--gpus-per-node G` each node runs G
processes, one per GPU, and the libraries take their GPU paths (NCCL).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from distbench.backends import DISTRIBUTED, get_spec
from distbench.config import parse_fault
from distbench.errors import UserError
from distbench.launching import link, slurm, topology
from distbench.launching.commands import launchers_of, restarting_launcher
from distbench.launching.launch import BIN, HOROVODRUN, SRUN, Launcher
from distbench.process import free_port
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.executor import Executor, Started

# How each run is started on Slurm: "usual", each backend's usual launcher (torchrun, accelerate launch, horovodrun)
# in its Slurm form; "srun", one srun task per process for the backends srun can start (ddp), the usual for the rest.
LAUNCH_FORMS = ("usual", "srun")


class SlurmExecutor(Executor):
    """The Slurm allocation this process runs in (`alloc`, else the current one's): each run a job step over its
    first `--nodes` nodes, started in `launch_form` (LAUNCH_FORMS)."""

    def __init__(self, launch_form: str = "usual", alloc: slurm.Allocation | None = None, restarts: int = 0):
        if launch_form not in LAUNCH_FORMS:
            raise UserError(f"--slurm-launch {launch_form!r}: one of {', '.join(LAUNCH_FORMS)}")
        self.alloc = alloc or slurm.Allocation.current()
        self.launch_form, self.restarts = launch_form, restarts
        self._node_cores: list[list[int]] | None = None

    def check(self, configs: list[SweepConfig], emulated: bool = False, dilation: float = 1.0) -> None:
        """More nodes than the allocation has, a shaped link or a link taken down (the cluster's network is the link)
        and hosts horovodrun cannot tell apart: one line, before any run."""
        for c in configs:
            self.alloc.check(c.nodes)
            if c.link_rate != link.UNSHAPED:
                raise UserError(
                    f"--link-rate {c.link_rate} shapes this machine's loopback; under --scheduler slurm "
                    "the runs cross the cluster's own network (give none)"
                )
            if self.restarts and c.backend in DISTRIBUTED:
                self._check_continues()
            if self.launcher(c.backend).name == HOROVODRUN.name:
                self.alloc.horovod_hosts(c.nodes)
            fault = parse_fault(c.fault)
            if fault is not None and fault.kind == "link-down":
                raise UserError(
                    f"--fault {c.fault} takes down a simulated node's link on this machine; under --scheduler slurm "
                    "the nodes are the cluster's, whose network distbench does not touch"
                )
            if fault is not None and fault.returns:
                raise UserError(
                    f"--fault {c.fault} starts a simulated node again; under --scheduler slurm a node comes back when "
                    "Slurm resumes it (scontrol update NodeName=... State=RESUME): give kill-node without a return"
                )

    def node_cores(self) -> list[list[int]]:
        """The cores a task of each node may use, in node order (one probe step over the whole allocation)."""
        if self._node_cores is None:
            probe = "import os; print(os.environ['SLURM_NODEID'], *sorted(os.sched_getaffinity(0)))"
            cmd = [*slurm.step(len(self.alloc.nodes), 1, "distbench-probe"), "python", "-c", probe]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=self._env({}))
            if proc.returncode != 0:
                raise UserError(f"the probe step of job {self.alloc.job_id} failed: {' '.join(proc.stderr.split())}")
            rows = sorted([int(x) for x in line.split()] for line in proc.stdout.splitlines() if line.strip())
            self._node_cores = [row[1:] for row in rows]
        return self._node_cores

    def cpus_per_node(self, nodes: int) -> int:
        """The fewest cores a task may use on any of the first `nodes` nodes."""
        return min(len(cores) for cores in self.node_cores()[:nodes])

    def _check_continues(self) -> None:
        """srun's own tasks, which restart nothing, asked to continue a job: one line."""
        if self.launch_form == "srun":
            raise UserError(
                f"--restarts {self.restarts} with --slurm-launch srun: srun's own tasks restart nothing; the "
                "launchers that continue a job run their agents in the step (--slurm-launch usual)"
            )

    def launcher(self, backend: str) -> Launcher:
        """The launcher that starts `backend`'s runs: with restarts, the one that continues its job after a failure
        (commands.restarting_launcher); else srun's own tasks where asked for, or where the usual launcher runs in no
        job step (Fabric's), and the backend allows them."""
        if self.restarts and backend in DISTRIBUTED:
            return restarting_launcher(backend, self.restarts)
        usual, *others = launchers_of(backend)
        return SRUN if (self.launch_form == "srun" or not usual.in_slurm_step) and SRUN in others else usual

    def command(
        self, config: SweepConfig, args: list[str], name: str, program: list[str] | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """The srun that starts this configuration as a job step, and the variables it adds."""
        launcher, port = self.launcher(config.backend), free_port()
        program = program or get_spec(config.backend).program(args)
        cmd = slurm.launch_step(launcher, self.alloc, program, config.nodes, config.nprocs, port, name)
        if launcher is SRUN:  # srun's own tasks meet at the first node
            return cmd, {"MASTER_ADDR": self.alloc.addrs[0], "MASTER_PORT": str(port)}
        if launcher.name == HOROVODRUN.name:
            # Horovod: every process confines itself to its node's cores (the ones Slurm gave that node's tasks);
            # several nodes on one host would otherwise run all of horovodrun's processes on the first node's
            cores = topology.SimulatedNodes(tuple(tuple(c) for c in self.node_cores()[: config.nodes]))
            return cmd, {topology.NODE_CORES_ENV: cores.env_value()}
        return cmd, {}

    def _env(self, added: dict[str, str]) -> dict[str, str]:
        # srun passes this environment to its tasks: the launchers and python are this environment's
        return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **added}

    @contextlib.contextmanager
    def start(self, config: SweepConfig, args: list[str], program: list[str] | None = None) -> Iterator[Started]:
        """A job step of its own name, which a timeout or Ctrl-C cancels, and so does its end (nothing of it left on
        any node once its srun ended)."""
        name = f"distbench-{uuid.uuid4().hex[:12]}"
        cmd, added = self.command(config, args, name, program)
        shown = topology.NodeLaunch([cmd], added).shell()
        stop = lambda: slurm.cancel(self.alloc.job_id, name)  # noqa: E731
        continues = bool(self.restarts) and config.backend in DISTRIBUTED
        yield Started([cmd], self._env(added), shown, stop=stop, continues=continues)
        slurm.cancel(self.alloc.job_id, name)

    def add_facts(self, record: dict, config: SweepConfig) -> dict:
        """The record with the scheduler's facts (`facts`) under `scheduler`."""
        record["scheduler"] = self.facts(record, config.nodes)
        return record

    def facts(self, record: dict, nodes: int) -> dict:
        """The scheduler's facts of a run: its job, the nodes' names and addresses, each rank's node; the training
        process's own (its step, its CPUs and GPUs) merged in."""
        facts = {
            "name": "slurm",
            "job_id": self.alloc.job_id,
            "nodes": list(self.alloc.nodes[:nodes]),
            "node_addrs": list(self.alloc.addrs[:nodes]),
        }
        ranks = (record.get("topology") or {}).get("rank_nodes")
        if ranks is not None:
            facts["rank_nodes"] = [self.alloc.nodes[i] for i in ranks]
        return {**(record.get("scheduler") or {}), **facts}


# ---- the sbatch script (`run.py slurm-script`) ----------------------------------------------------------------
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
        """A count that is not positive, --nprocs beside --gpus-per-node, a time Slurm would misread: one line."""
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
        """The processes per node: one per GPU, else --nprocs, else one."""
        return self.gpus_per_node or self.nprocs or 1

    def directives(self, log: PurePosixPath, workdir: PurePosixPath | None) -> list[str]:
        """The #SBATCH lines of what was given: the job's output to `log`, started in `workdir` where given."""
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


def write_script(request: Request, place: Place, compare_args: list[str], path: Path | None, send: bool) -> str:
    """`run.py slurm-script`: the script (checked: one line for a bad request), written to `path` and submitted
    (`send`) where asked; returns what to print: the script itself where no path is given, else what was done."""
    text = script(request, place, compare_args)
    if send and path is None:
        raise UserError("--submit needs --script FILE (the script sbatch runs)")
    warn_node_local(place)
    if path is None:
        return text
    path.write_text(text)
    path.chmod(0o755)
    return f"submitted job {submit(path)}: {path}\n" if send else ""


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
