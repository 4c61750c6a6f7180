"""Launchers and the launch environment: how processes are started, and what each one is told.

One `Launcher` per launcher (plain python, torchrun, accelerate launch, horovodrun, variables set by
hand). Each builds its real command lines (one node or several) and recognises the environment it gives
its processes. The help text (`run.py --help`) and the commands that `compare`, the benchmarks and the
tests run come from the same `commands()`: the help leaves out the loopback rendezvous that a local run
adds, and writes placeholders where a user fills in numbers.

`LaunchEnv` is that environment read once, before any backend's setup (which may write variables of its
own: DDP gives a plain `python` run a world of one), into one frozen value that everything else uses.
No distributed library is imported here.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

BIN = Path(sys.executable).parent
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on loopback now (a launcher binds it a moment later)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchEnv:
    """What the launcher told this process, read before any process group exists."""

    launcher: str  # the Launcher's name, as recorded ("python", "torchrun", ...)
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    restart_count: int = 0  # torchrun's agent: how often it had restarted the worker group before this one
    node_rank: int = 0  # which node (machine, or simulated node) this process runs on
    nodes: int = 1  # how many nodes the job spans

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def read(cls, env: Mapping[str, str] = os.environ) -> LaunchEnv:
        launcher = next(launcher for launcher in DETECTION_ORDER if launcher.detects(env))
        return launcher.read(env)


@functools.cache
def current() -> LaunchEnv:
    """This process's launch environment, read at the first call (before the backend's setup)."""
    return LaunchEnv.read(os.environ)


Program = list[str]  # what follows `python`: ["run.py", *args] or ["-m", "package.module", *args]


class Launcher:
    """A way to start N processes per node on one or several nodes.

    `commands(program, nprocs, hosts, port)` returns the command lines to run, one per node for launchers
    that run an agent on each node (torchrun, accelerate launch), one for all nodes for horovodrun. With
    `hosts=None` the launcher's own rendezvous defaults are used (the form shown in help); a local run
    passes `hosts=[LOOPBACK]` and a free port. Executables are named as a user types them; `resolve()`
    turns the names into this environment's paths.
    """

    name: str = ""
    several_nodes_note: str = ""  # how the several-node command is used, for the help text

    def detects(self, env: Mapping[str, str]) -> bool:
        raise NotImplementedError

    # the variables that hold rank, local rank, world size, local world size, restarts, node rank and node
    # count: torch's (torchrun's agent, also under accelerate launch) unless a launcher says otherwise
    variables = (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "TORCHELASTIC_RESTART_COUNT",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
    )

    def read(self, env: Mapping[str, str]) -> LaunchEnv:
        rank, local_rank, size, local_size, restarts, node, nodes = (env.get(v) for v in self.variables)
        rank, size, local_size = int(rank or 0), int(size or 1), int(local_size or 1)
        # where the launcher does not say (by hand): nodes of local_size processes each, filled in rank order
        node = int(node) if node else rank // local_size
        nodes = int(nodes) if nodes else max(1, size // local_size)
        return LaunchEnv(self.name, rank, int(local_rank or 0), size, local_size, int(restarts or 0), node, nodes)

    def commands(
        self, program: Program, nprocs: int | str, hosts: list[str] | None = None, port: int | str | None = None
    ) -> list[list[str]]:
        raise NotImplementedError


class Python(Launcher):
    name = "python"

    variables = ("",) * 7  # none: one process

    def detects(self, env):
        return True  # what is left when no launcher's variables are there

    def commands(self, program, nprocs, hosts=None, port=None):
        if nprocs not in (1, "1") or (hosts and len(hosts) > 1):
            raise ValueError(f"plain python runs one process, not {nprocs} on {len(hosts or [1])} node(s)")
        return [["python", *program]]


class Torchrun(Launcher):
    name = "torchrun"
    several_nodes_note = "(the same on each machine)"

    def detects(self, env):
        return "TORCHELASTIC_RUN_ID" in env

    def commands(self, program, nprocs, hosts=None, port=None):
        agent = ["torchrun", "--nproc_per_node", str(nprocs)]
        if not hosts:
            return [[*agent, *program]]
        if len(hosts) == 1:  # torchrun's static rendezvous on the given address
            return [[*agent, "--master_addr", hosts[0], "--master_port", str(port), *program]]
        # several nodes: one agent per node, meeting at the c10d rendezvous on the first node
        rendezvous = ["--nnodes", str(len(hosts)), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts[0]}:{port}"]
        return [[*agent, *rendezvous, *_rendezvous_host(hosts, i), *program] for i in range(len(hosts))]


def _rendezvous_host(hosts: list, i: int) -> list[str]:
    """torchrun finds the agent that serves the c10d store by matching the endpoint to its machine's host name, and
    tells the workers the store's address by that name; a node whose name does not resolve to its link's address (a
    simulated node in a network namespace of its own) is told both: the first node hosts, the others do not, and
    each node's address is its own (--local-addr). Where every node is one address (loopback), the names stand."""
    distinct = len(set(hosts)) == len(hosts)
    try:
        addresses = all(ipaddress.ip_address(h) for h in hosts)
    except ValueError:
        addresses = False
    return ["--rdzv-conf", f"is_host={int(i == 0)}", "--local-addr", hosts[i]] if distinct and addresses else []


class AccelerateLaunch(Launcher):
    name = "accelerate launch"
    several_nodes_note = "(on machine R: --machine_rank R)"

    def detects(self, env):
        return "RANK" in env and any(k.startswith("ACCELERATE_") for k in env)

    def commands(self, program, nprocs, hosts=None, port=None):
        nodes = len(hosts or [None])
        if nodes == 1 and nprocs in (1, "1"):
            return [["python", *program]]  # accelerate launch with one process is plain python
        total = str(nprocs) if nodes == 1 else str(int(nprocs) * nodes)  # --num_processes counts all nodes
        # Accelerate: the precision and compiler settings are given, so a user's `accelerate config` file
        # cannot change what is compared.
        fixed = ["--mixed_precision", "no", "--dynamo_backend", "no"]
        if not hosts:
            return [["accelerate", "launch", "--multi_gpu", "--num_processes", total, *fixed, *program]]
        rendezvous = ["--main_process_ip", hosts[0], "--main_process_port", str(port)]
        return [
            [
                "accelerate",
                "launch",
                "--multi_gpu",
                "--num_processes",
                total,
                "--num_machines",
                str(nodes),
                "--machine_rank",
                str(rank),
                *fixed,
                *rendezvous,
                *program,
            ]
            for rank in range(nodes)
        ]


class Horovodrun(Launcher):
    name = "horovodrun"
    several_nodes_note = "(once, on host1)"

    def detects(self, env):
        return "HOROVOD_RANK" in env or "HOROVOD_GLOO_RENDEZVOUS_ADDR" in env

    # Horovod: a node is a "cross" group; no restarts
    variables = (
        "HOROVOD_RANK",
        "HOROVOD_LOCAL_RANK",
        "HOROVOD_SIZE",
        "HOROVOD_LOCAL_SIZE",
        "",
        "HOROVOD_CROSS_RANK",
        "HOROVOD_CROSS_SIZE",
    )

    def commands(self, program, nprocs, hosts=None, port=None):
        # Horovod: one horovodrun for every node; it starts the remote ones (ssh, or directly for a host
        # whose address is this machine's). The port is its own choice.
        if not hosts:
            return [["horovodrun", "-np", str(nprocs), "python", *program]]
        total = str(int(nprocs) * len(hosts)) if len(hosts) > 1 else str(nprocs)
        slots = ",".join(f"{host}:{nprocs}" for host in hosts)
        return [["horovodrun", "-np", total, "-H", slots, "python", *program]]


class ByHand(Launcher):
    """RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set for each process by the user or a scheduler (srun)."""

    name = "env (RANK/WORLD_SIZE)"

    def detects(self, env):
        return "RANK" in env and "WORLD_SIZE" in env

    def commands(self, program, nprocs, hosts=None, port=None):
        hosts, n = hosts or ["HOST0"], int(nprocs)
        return [
            [
                "env",
                f"RANK={node * n + local}",
                f"WORLD_SIZE={n * len(hosts)}",
                f"LOCAL_RANK={local}",
                f"LOCAL_WORLD_SIZE={n}",
                f"MASTER_ADDR={hosts[0]}",
                f"MASTER_PORT={port or 29500}",
                "python",
                *program,
            ]
            for node in range(len(hosts))
            for local in range(n)
        ]


class Srun(Launcher):
    """srun's own tasks, one per process: SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS (the run needs MASTER_ADDR and
    MASTER_PORT besides)."""

    name = "srun"
    several_nodes_note = "(in an allocation; MASTER_ADDR/MASTER_PORT: the first node's)"
    variables = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "", "", "SLURM_NODEID", "SLURM_STEP_NUM_NODES")

    def detects(self, env):
        return "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_NTASKS" in env

    def read(self, env):
        launch = super().read(env)
        # srun gives no local world size: the step's tasks spread evenly over its nodes
        local = int(env["SLURM_NTASKS"]) // max(1, int(env.get("SLURM_STEP_NUM_NODES") or 1))
        return replace(launch, local_world_size=max(1, local))

    def commands(self, program, nprocs, hosts=None, port=None):
        nodes = len(hosts or [None])
        return [["srun", "--nodes", str(nodes), "--ntasks-per-node", str(nprocs), "python", *program]]


PYTHON, TORCHRUN, ACCELERATE, HOROVODRUN, BY_HAND, SRUN = (
    Python(),
    Torchrun(),
    AccelerateLaunch(),
    Horovodrun(),
    ByHand(),
    Srun(),
)
# The order matters: accelerate launch runs torchrun's agent (so it sets torchrun's variables too), and both
# set RANK/WORLD_SIZE; a launcher started inside a Slurm step sees the step's SLURM_* variables too, so srun's own
# tasks come after every launcher (and after variables set by hand).
DETECTION_ORDER = (HOROVODRUN, ACCELERATE, TORCHRUN, BY_HAND, SRUN, PYTHON)


def resolve(argv: list[str]) -> list[str]:
    """A command as `commands()` writes it, with this environment's python and launchers."""
    argv = list(argv)
    if "python" in argv:  # the interpreter that runs the program (the first "python": later ones are its own)
        argv[argv.index("python")] = sys.executable
    # the launcher, after what a simulated node puts in front of it (`ip netns exec NS`, `taskset -c CORES`)
    start = 4 if argv[0] == "ip" else 0
    start += 3 if argv[start] == "taskset" else 0
    if argv[start] in ("torchrun", "accelerate", "horovodrun"):
        argv[start] = str(BIN / argv[start])
    if argv[0] == "ip":
        argv[0] = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin") or "ip"
    return argv


def local_argv(launcher: Launcher, program: Program, nprocs: int) -> list[str]:
    """The one command that starts `program` with nprocs processes on this machine, rendezvous on loopback,
    as a user types it (`resolve` it to run it)."""
    (argv,) = launcher.commands(program, nprocs, hosts=[LOOPBACK], port=free_port())
    return argv
