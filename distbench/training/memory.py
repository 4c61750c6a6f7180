"""Memory per rank, exactly: the bytes of parameters, gradients and optimizer state that each rank holds.

Counted from the tensors themselves, not from the allocator: a sharded parameter (a DTensor, FSDP's) counts its
local shard, a replicated one its whole tensor. The record keeps the largest rank's count of each (ranks differ by
the padding of uneven shards), and on a GPU the allocator's peak (`torch.cuda.max_memory_allocated`), which adds
activations and the libraries' buffers (DDP's buckets, FSDP's all-gathered parameters, Horovod's fusion buffer).
Peak RSS stays in the record as `peak_rss_mb`: on a CPU it is mostly the libraries themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: the report reads KINDS without it
    import torch
    from torch import nn

    from distbench.backends.base import Backend

KINDS = ("params_bytes", "grads_bytes", "optimizer_bytes")


def state_bytes(counts: dict) -> int | None:
    """Parameters + gradients + optimizer state of a `per_rank` count (or a report row holding KINDS); None where
    they were not counted (records from before memory_per_rank)."""
    return None if counts.get("params_bytes") is None else sum(counts[k] for k in KINDS)


def local_bytes(t: torch.Tensor) -> int:
    """The bytes of `t` that this rank holds: a DTensor's local shard, any other tensor whole."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def held(model: nn.Module, optimizer) -> dict[str, int]:
    """This rank's bytes of parameters, gradients (those that exist now) and optimizer state tensors."""
    import torch

    params = list(model.parameters())
    states = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return {
        "params_bytes": sum(local_bytes(p) for p in params),
        "grads_bytes": sum(local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer_bytes": sum(local_bytes(v) for v in states),
    }


def per_rank(model: nn.Module, optimizer, backend: Backend) -> dict[str, int | None]:
    """The largest rank's `held` counts (None each where the backend's library keeps state they do not show:
    `memory_counted`) and, on a GPU, its peak allocated bytes (a collective)."""
    import torch

    from distbench.backends.base import ReduceOp

    # not counted: -1 for each, the all-reduce below is a collective all the same (every rank joins it)
    mine = held(model, optimizer) if backend.memory_counted else dict.fromkeys(KINDS, -1)
    device = backend.device
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else -1
    values = torch.tensor([*mine.values(), peak], dtype=torch.float64, device=device)
    top = backend.all_reduce(values, ReduceOp.MAX).cpu().tolist()
    out: dict[str, int | None] = {k: int(v) if v >= 0 else None for k, v in zip(KINDS, top, strict=False)}
    out["peak_allocated_bytes"] = int(top[-1]) if top[-1] >= 0 else None
    return out
