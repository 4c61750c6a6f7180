"""The backend registry: one entry per backend, the only place the set of backends is spelled.

An entry names the backend, the class that implements it (imported only when asked for, so a missing
optional library such as horovod is one clear message for that backend, not an ImportError at start-up),
the launchers that may start it, by name (the first is its users' usual one: `compare` runs it, `--help` shows it
first), a line of help, and whether it is distributed (the one that is not, `single`, is the reference every
comparison is measured against: REFERENCE; the others: DISTRIBUTED). Adding a backend is one file in this package
and one entry here.

The registry knows launchers only by their names (distbench/process.py): launching, a layer above, reads the
entries to build each backend's commands, its wrong-launcher error and the help's launch commands
(distbench/launching/commands.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from distbench.errors import BackendUnavailable, UserError
from distbench.process import (
    ACCELERATE,
    BY_HAND,
    DEEPSPEED,
    FABRIC,
    HOROVODRUN,
    PYTHON,
    SRUN,
    TORCHRUN,
    LaunchEnv,
)


@dataclass(frozen=True)
class BackendSpec:
    """One backend's entry: its name, its class ("module:Class"), the launchers that may start it (by name, the
    usual one first), a line of help, whether it is distributed and how its gradients cross the ranks."""

    name: str
    cls: str  # "module:Class"
    launchers: tuple[str, ...]  # launcher names (distbench/process.py), the usual one first
    help: str
    distributed: bool = True  # False: one process, no exchange (the reference of speed-up and equivalence)
    exchange: str = "all-reduce"  # how its gradients cross the ranks: all-reduce, reduce-scatter (sharded), or zero
    # (DeepSpeed's ZeRO: by --zero-stage, an all-reduce at 0, reduce-scatters and all-gathers at 1 to 3)
    compresses: bool = True  # whether its library sends gradients in 16 bits by a mechanism of its own
    # (--grad-compression; a sweep over it runs the others once, uncompressed)
    spins: str = ""  # how its waiting rank keeps a core busy, where it does: what an emulated run's host check says

    @property
    def zero_stages(self) -> bool:
        """Whether it takes --zero-stage: DeepSpeed's ZeRO exchange."""
        return self.exchange == "zero"

    def program(self, args: list[str]) -> list[str]:
        """What follows `python` to run this backend with `args`: `run.py --backend NAME ARGS`."""
        return ["run.py", "--backend", self.name, *args]

    def may_join(self, launch: LaunchEnv) -> bool:
        """Whether this backend sees the world of a process started as `launch` says correctly: one of its
        launchers started it, and a backend that is not distributed runs alone."""
        return launch.launcher in self.launchers and (self.distributed or launch.world_size == 1)

    def check_options(self, cfg) -> None:
        """Options this backend cannot honour (a RunConfig, validated otherwise): one line, before any setup."""
        if not self.distributed and cfg.grad_compression != "none":
            raise UserError(
                f"--grad-compression {cfg.grad_compression}: the {self.name} backend exchanges no gradients; use none"
            )
        if self.distributed and cfg.grad_compression != "none" and not self.compresses:
            raise UserError(
                f"--grad-compression {cfg.grad_compression}: the {self.name} backend's library has no gradient "
                "compression of its own; use none"
            )
        if cfg.zero_stage and not self.zero_stages:
            stages = ", ".join(name for name, spec in REGISTRY.items() if spec.zero_stages)
            raise UserError(f"--zero-stage {cfg.zero_stage}: only {stages} have ZeRO stages; leave it 0")

    def load(self):
        """The backend's class, imported now; a library that cannot be imported is one line (BackendUnavailable)."""
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
            "horovod",
            "distbench.backends.horovod_backend:HorovodBackend",
            (HOROVODRUN, PYTHON),
            "Horovod (gloo)",
            # Horovod 0.28.1: synchronize() polls for the all-reduce's end in a loop of std::this_thread::yield
            # (horovod/torch/mpi_ops_v2.cc, WaitAndClear), so a rank that waits for the exchange keeps its core busy
            spins=(
                "Horovod's ranks keep their cores busy while they wait for an exchange (its synchronize() polls in a "
                "loop of yields), at any dilation: an emulated Horovod rank cannot leave its core free"
            ),
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
        BackendSpec(
            "deepspeed",
            "distbench.backends.deepspeed_backend:DeepSpeedBackend",
            (DEEPSPEED, TORCHRUN, BY_HAND, PYTHON),
            "DeepSpeed ZeRO (deepspeed.initialize), stage --zero-stage 0-3",
            exchange="zero",
        ),
        BackendSpec(
            "accelerate-deepspeed",
            "distbench.backends.accelerate_deepspeed:AccelerateDeepSpeedBackend",
            (ACCELERATE, TORCHRUN, BY_HAND, PYTHON),
            "HuggingFace Accelerate driving DeepSpeed ZeRO (DeepSpeedPlugin), stage --zero-stage 0-3",
            exchange="zero",
        ),
        BackendSpec(
            "fabric",
            "distbench.backends.fabric_backend:FabricBackend",
            (FABRIC, TORCHRUN, SRUN, PYTHON),
            "Lightning Fabric, its DDP strategy (DDPStrategy)",
            compresses=False,  # Fabric: its DDPStrategy takes no DDP communication hook (Lightning's Trainer's does)
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


def spins(name: str) -> str:
    """How backend `name`'s waiting ranks keep their cores busy ("" where they do not, or no such backend)."""
    spec = REGISTRY.get(name)
    return spec.spins if spec is not None else ""


def get_spec(name: str) -> BackendSpec:
    """The entry of the backend `name`; an unknown name is one line naming the choices."""
    if name not in REGISTRY:
        raise UserError(f"unknown backend {name!r}; choose one of {', '.join(NAMES)}")
    return REGISTRY[name]


def get_backend_class(name: str):
    """The class of the backend `name`, imported now."""
    return get_spec(name).load()
