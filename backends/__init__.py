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
