"""The backend registry: one entry per backend, the only place the set of backends is spelled.

An entry names the backend, the class that implements it (imported only when asked for, so a missing
optional library such as horovod is one clear message for that backend, not an ImportError at start-up),
the launchers that may start it (the first is its users' usual one: `compare` runs it, `--help` shows it
first), a line of help, and whether it is distributed (the one that is not, `single`, is the reference every
comparison is measured against: REFERENCE; the others: DISTRIBUTED). Adding a backend is one file in this package
and one entry here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from distbench.errors import BackendUnavailable, UserError
from distbench.launching.launch import (
    ACCELERATE,
    BY_HAND,
    HOROVODRUN,
    PYTHON,
    SRUN,
    TORCHRUN,
    LaunchEnv,
    Launcher,
    local_argv,
    resolve,
)


@dataclass(frozen=True)
class BackendSpec:
    name: str
    cls: str  # "module:Class"
    launchers: tuple[Launcher, ...]
    help: str
    distributed: bool = True  # False: one process, no exchange (the reference of speed-up and equivalence)
    exchange: str = "all-reduce"  # how its gradients cross the ranks: all-reduce, or reduce-scatter (sharded)

    def program(self, args: list[str]) -> list[str]:
        return ["run.py", "--backend", self.name, *args]

    def check_launch(self, launch: LaunchEnv) -> None:
        """Refuse a launcher whose world this backend would not see correctly (before any setup)."""
        if launch.launcher not in {launcher.name for launcher in self.launchers} or (
            not self.distributed and launch.world_size > 1
        ):
            (first,) = self.launchers[0].commands(self.program([]), 1 if self.launchers[0] is PYTHON else "N")
            raise UserError(
                f"--backend {self.name} was started by {launch.launcher} with {launch.world_size} process(es), "
                f"which it cannot join; start it with: {' '.join(first)}"
            )

    def check_options(self, cfg) -> None:
        """Options this backend cannot honour (a RunConfig, validated otherwise): one line, before any setup."""
        if not self.distributed and cfg.grad_compression != "none":
            raise UserError(
                f"--grad-compression {cfg.grad_compression}: the {self.name} backend exchanges no gradients; use none"
            )

    def load(self):
        module, cls = self.cls.split(":")
        try:
            return getattr(importlib.import_module(module), cls)
        except BackendUnavailable:
            raise
        except ImportError as e:
            raise BackendUnavailable(f"--backend {self.name} cannot be imported: {e}") from e


REGISTRY: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            "single",
            "distbench.backends.single:SingleBackend",
            (PYTHON, SRUN),
            "one process, no process group",
            distributed=False,
        ),
        BackendSpec(
            "ddp",
            "distbench.backends.ddp:DDPBackend",
            (TORCHRUN, BY_HAND, SRUN, PYTHON),
            "PyTorch DistributedDataParallel",
        ),
        BackendSpec(
            "accelerate",
            "distbench.backends.accelerate_backend:AccelerateBackend",
            (ACCELERATE, TORCHRUN, BY_HAND, PYTHON),
            "HuggingFace Accelerate",
        ),
        BackendSpec(
            "horovod", "distbench.backends.horovod_backend:HorovodBackend", (HOROVODRUN, PYTHON), "Horovod (gloo)"
        ),
        BackendSpec(
            "fsdp",
            "distbench.backends.fsdp:FSDPBackend",
            (TORCHRUN, BY_HAND, SRUN, PYTHON),
            "PyTorch FSDP2 (fully_shard): parameters, gradients and optimizer state sharded",
            exchange="reduce-scatter",
        ),
        BackendSpec(
            "accelerate-fsdp",
            "distbench.backends.accelerate_fsdp:AccelerateFSDPBackend",
            (ACCELERATE, TORCHRUN, BY_HAND, PYTHON),
            "HuggingFace Accelerate driving FSDP2 (FullyShardedDataParallelPlugin, fsdp_version=2)",
            exchange="reduce-scatter",
        ),
    )
}
NAMES = tuple(REGISTRY)
(REFERENCE,) = (name for name, spec in REGISTRY.items() if not spec.distributed)
DISTRIBUTED = tuple(name for name, spec in REGISTRY.items() if spec.distributed)
# the replicating libraries, whose gradient exchange is an all-reduce: what commbench times and project models
ALL_REDUCING = tuple(name for name in DISTRIBUTED if REGISTRY[name].exchange == "all-reduce")
# the sharding ones: each rank holds 1/W of the parameters, gradients and optimizer state
SHARDING = tuple(name for name in DISTRIBUTED if REGISTRY[name].exchange == "reduce-scatter")


def get_spec(name: str) -> BackendSpec:
    if name not in REGISTRY:
        raise UserError(f"unknown backend {name!r}; choose one of {', '.join(NAMES)}")
    return REGISTRY[name]


def get_backend_class(name: str):
    return get_spec(name).load()


def typed_command(backend: str, nprocs: int, args: list[str], launcher: Launcher | None = None) -> list[str]:
    """`run.py --backend BACKEND ARGS` with nprocs processes on this machine, started by the backend's
    usual launcher (or the one given), as a user types it."""
    spec = get_spec(backend)
    return local_argv(launcher or spec.launchers[0], spec.program(args), nprocs)


def command(backend: str, nprocs: int, args: list[str], launcher: Launcher | None = None) -> list[str]:
    """typed_command with this environment's python and launchers: ready to run."""
    return resolve(typed_command(backend, nprocs, args, launcher))


def launch_help() -> str:
    """Every backend's launch commands for `run.py --help`: N processes on one machine, then 2 machines of
    4 processes; each block marked \\b so that click keeps it as it is."""
    lines = ["Launch commands (N processes on one machine; several machines):", ""]
    width = max(len(name) for name in NAMES) + 1
    for spec in REGISTRY.values():
        usual = spec.launchers[0]
        n = 1 if usual is PYTHON else "N"  # a launcher's own form where it starts one process per program
        block = [" ".join(usual.commands(spec.program([]), n)[0])]
        if spec.distributed:
            several = usual.commands(spec.program([]), 4, hosts=["host1", "host2"], port=29500)[0]
            block.append(f"{' '.join(several)}   {usual.several_nodes_note}")
            block += [
                f"(also: {' '.join(other.commands(spec.program([]), 'N')[0])})"
                for other in spec.launchers[1:]
                if other not in (BY_HAND, PYTHON)
            ]
        lines += ["\b", f"{spec.name:<{width}} {block[0]}", *(f"{'':<{width}} {more}" for more in block[1:]), ""]
    by_hand = [spec.name for spec in REGISTRY.values() if BY_HAND in spec.launchers]
    lines += [
        "\b",
        f"{'':<{width}} {', '.join(by_hand[:-1])} and {by_hand[-1]} also join a world whose RANK, WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT are set for each process (mpirun, a script of your own); "
        "under Slurm: `run.py slurm-script`.",
        "",
    ]
    return "\n".join(lines)
