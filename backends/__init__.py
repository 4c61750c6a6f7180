"""Backend registry. Each backend is imported only when asked for, so a missing optional library
(accelerate, horovod) is one clear message for that backend, not an ImportError at start-up."""

from __future__ import annotations

import importlib

from distbench.errors import BackendUnavailable, UserError

_REGISTRY = {
    "single": ("backends.single", "SingleBackend"),
    "ddp": ("backends.ddp", "DDPBackend"),
    "accelerate": ("backends.accelerate_backend", "AccelerateBackend"),
    "horovod": ("backends.horovod_backend", "HorovodBackend"),
}

NAMES = tuple(_REGISTRY)

# How to start each backend: N processes on one machine, then other ways (several machines, other
# launchers). Kept here, where no library is imported, so that `run.py --help` and each backend's
# wrong-launcher error read the same text.
LAUNCH: dict[str, tuple[str, ...]] = {
    "single": ("python run.py --backend single",),
    "ddp": (
        "torchrun --nproc_per_node N run.py --backend ddp",
        "torchrun --nnodes 2 --nproc_per_node N --rdzv-backend c10d --rdzv-endpoint HOST0:29400 run.py --backend ddp",
    ),
    "accelerate": (
        "accelerate launch --multi_gpu --num_processes N run.py --backend accelerate",
        "(also: torchrun --nproc_per_node N run.py --backend accelerate)",
        "accelerate launch --multi_gpu --num_machines 2 --machine_rank R --main_process_ip HOST0 "
        "--main_process_port 29500 --num_processes TOTAL run.py --backend accelerate",
    ),
    "horovod": (
        "horovodrun -np N python run.py --backend horovod",
        "horovodrun -np 8 -H host1:4,host2:4 python run.py --backend horovod",
    ),
}


def launch_help() -> str:
    """The launch commands of every backend, for `run.py --help` (each block marked \\b: click keeps it as is)."""
    lines = ["Launch commands (N processes on one machine; several machines):", ""]
    for name, (first, *rest) in LAUNCH.items():
        lines += ["\b", f"{name:<11} {first}", *(f"{'':<11} {more}" for more in rest), ""]
    return "\n".join(lines)


def get_backend_class(name: str):
    if name not in _REGISTRY:
        raise UserError(f"unknown backend {name!r}; choose one of {', '.join(NAMES)}")
    module, cls = _REGISTRY[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except BackendUnavailable:
        raise
    except ImportError as e:
        raise BackendUnavailable(f"--backend {name} cannot be imported: {e}") from e
