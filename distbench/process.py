"""What a process was told by its launcher: the launch environment, read once before any process group exists.

Every launcher tells the processes it starts where they stand through variables of its own: torch's RANK,
WORLD_SIZE, ... (torchrun's agent, also under accelerate launch, or set by hand), Horovod's HOROVOD_*, Slurm's
SLURM_*. This module names the launchers (plain strings, as the record keeps them and the backend registry lists
them), recognises which one started this process and reads its variables into one frozen `LaunchEnv`, which the
backend, the validation, the default threads, core pinning, the error printing and the record all use. It reads
them before any backend's setup, which may write variables of its own (DDP gives a plain `python` run a world of
one).

How a launcher *starts* processes, its command lines, is launching's (distbench/launching/launch.py), a layer above
the backends; this module is the core's, below them, and imports no distributed library.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

# the launchers, by the names the record keeps ("launcher")
PYTHON = "python"
TORCHRUN = "torchrun"
ACCELERATE = "accelerate launch"
HOROVODRUN = "horovodrun"
BY_HAND = "env (RANK/WORLD_SIZE)"  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set per process (mpirun, a script)
SRUN = "srun"  # Slurm's own tasks, one per process
DEEPSPEED = "deepspeed"  # DeepSpeed's own launcher (deepspeed.launcher.runner, then its launch.py on each node)
FABRIC = "fabric run"  # Lightning Fabric's own launcher (lightning_fabric.cli: torchrun's agent, static rendezvous)

LOOPBACK = "127.0.0.1"

# a lost node that comes back (--fault kill-node:NODE@STEP:BACK, sweep/node_return.py): the job's executor starts it
# again (told to every process of the job), and the node's agent started again (told to it, so to its workers)
NODE_RETURNS_ENV = "DISTBENCH_NODE_RETURNS"
NODE_RETURNED_ENV = "DISTBENCH_NODE_RETURNED"


def free_port() -> int:
    """A TCP port free on loopback now (a launcher binds it a moment later)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def world_of_one() -> None:
    """torch's env:// variables for one process started without a launcher (plain `python`): a world of one with a
    private rendezvous on loopback, so that a library that needs a process group even for one process has one and
    nothing listens on other interfaces."""
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR=LOOPBACK)
    os.environ.setdefault("MASTER_PORT", str(free_port()))


@dataclass(frozen=True)
class LaunchEnv:
    """What the launcher told this process, read before any process group exists.

    `launcher` is the launcher's name (PYTHON, TORCHRUN, ...); the ranks and sizes are the launcher's own numbers,
    with a world of one where it says nothing (plain python)."""

    launcher: str  # the launcher's name, as recorded ("python", "torchrun", ...)
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    restart_count: int = 0  # torchrun's agent: how often it had restarted the worker group before this one
    node_rank: int = 0  # which node (machine, or simulated node) this process runs on
    nodes: int = 1  # how many nodes the job spans

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0: the one that logs, prints errors and writes the record."""
        return self.rank == 0

    @classmethod
    def read(cls, env: Mapping[str, str] = os.environ) -> LaunchEnv:
        """The launch environment that `env` describes: the first launcher (DETECTION_ORDER) whose variables are
        there reads them."""
        told = next(told for told in DETECTION_ORDER if told.detects(env))
        return told.read(env)


@functools.cache
def current() -> LaunchEnv:
    """This process's launch environment, read at the first call (before the backend's setup)."""
    return LaunchEnv.read(os.environ)


# the variables that hold rank, local rank, world size, local world size, restarts, node rank and node count:
# torch's (torchrun's agent, also under accelerate launch) unless a launcher says otherwise
TORCH_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RESTART_COUNT",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
)


@dataclass(frozen=True)
class Told:
    """How one launcher tells its processes where they stand: whether its variables are there (`detects`), which
    they are (`variables`, in TORCH_VARIABLES' order, "" where it gives none) and, where it gives no local world size,
    how to derive it (`local_world_size`)."""

    launcher: str
    detects: Callable[[Mapping[str, str]], bool]
    variables: tuple[str, ...] = TORCH_VARIABLES
    local_world_size: Callable[[Mapping[str, str]], int] | None = None
    slurm_node: bool = False  # inside a Slurm step, this process's node is the machine Slurm numbered (SLURM_NODEID)

    def read(self, env: Mapping[str, str]) -> LaunchEnv:
        """This launcher's variables in `env`, as a LaunchEnv."""
        rank, local_rank, size, local_size, restarts, node, nodes = (env.get(v) for v in self.variables)
        rank, size, local_size = int(rank or 0), int(size or 1), int(local_size or 1)
        # where the launcher does not say (by hand): nodes of local_size processes each, filled in rank order
        node = int(node) if node else rank // local_size
        if self.slurm_node and "SLURM_STEP_ID" in env and "SLURM_NODEID" in env:
            node = int(env["SLURM_NODEID"])
        nodes = int(nodes) if nodes else max(1, size // local_size)
        launch = LaunchEnv(self.launcher, rank, int(local_rank or 0), size, local_size, int(restarts or 0), node, nodes)
        if self.local_world_size is not None:
            launch = replace(launch, local_world_size=self.local_world_size(env))
        return launch


def _srun_local_world_size(env: Mapping[str, str]) -> int:
    """srun gives no local world size: the step's tasks spread evenly over its nodes."""
    return max(1, int(env["SLURM_NTASKS"]) // max(1, int(env.get("SLURM_STEP_NUM_NODES") or 1)))


# The order matters: accelerate launch runs torchrun's agent (so it sets torchrun's variables too), and both
# set RANK/WORLD_SIZE; a launcher started inside a Slurm step sees the step's SLURM_* variables too, so srun's own
# tasks come after every launcher (and after variables set by hand). Plain python is what is left.
DETECTION_ORDER = (
    Told(
        HOROVODRUN,
        lambda env: "HOROVOD_RANK" in env or "HOROVOD_GLOO_RENDEZVOUS_ADDR" in env,
        # Horovod: a node is a "cross" group; no restarts
        (
            "HOROVOD_RANK",
            "HOROVOD_LOCAL_RANK",
            "HOROVOD_SIZE",
            "HOROVOD_LOCAL_SIZE",
            "",
            "HOROVOD_CROSS_RANK",
            "HOROVOD_CROSS_SIZE",
        ),
    ),
    Told(ACCELERATE, lambda env: "RANK" in env and any(k.startswith("ACCELERATE_") for k in env)),
    Told(
        DEEPSPEED,
        # DeepSpeed: its launch.py gives each process torch's RANK/LOCAL_RANK/WORLD_SIZE and, of its own, LOCAL_SIZE and
        # the node's CROSS_RANK/CROSS_SIZE (deepspeed/launcher/launch.py); no restarts
        lambda env: "RANK" in env and "CROSS_RANK" in env and "LOCAL_SIZE" in env,
        ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "", "CROSS_RANK", "CROSS_SIZE"),
    ),
    # Fabric: `fabric run` runs torchrun's agent in its own process (torchrun's variables) after setting its own
    # LT_* variables, which the Fabric object reads (lightning_fabric/cli.py)
    Told(FABRIC, lambda env: "RANK" in env and "LT_CLI_USED" in env),
    # torchrun: its c10d rendezvous numbers the nodes in the order their agents joined (GROUP_RANK), which on a
    # cluster is any order; in a Slurm step the node is the machine, as Slurm numbers the step's nodes: the one a node
    # fault names and the record's node names follow
    Told(TORCHRUN, lambda env: "TORCHELASTIC_RUN_ID" in env, slurm_node=True),
    Told(BY_HAND, lambda env: "RANK" in env and "WORLD_SIZE" in env),
    Told(
        SRUN,
        lambda env: "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_NTASKS" in env,
        ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "", "", "SLURM_NODEID", "SLURM_STEP_NUM_NODES"),
        _srun_local_world_size,
    ),
    Told(PYTHON, lambda env: True, ("",) * 7),  # none: one process
)
