"""Memory per rank, exactly: the bytes of parameters, gradients and optimizer state that each rank holds.

Counted from the tensors themselves, not from the allocator, by the backend (`Backend.memory_held`,
backends/held.py): a sharded parameter (a DTensor, FSDP's) counts its local shard, a replicated one its whole
tensor, a library's flat buffers (DeepSpeed's) each byte once. The record keeps the largest rank's count of each
(ranks differ by the padding of uneven shards), and on a GPU the allocator's peak (`torch.cuda.max_memory_allocated`),
which adds activations and the libraries' buffers (DDP's buckets, FSDP's all-gathered parameters, Horovod's fusion
buffer). Peak RSS stays in the record as `peak_rss_mb`: on a CPU it is mostly the libraries themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: the report reads KINDS without it
    from torch import nn

    from distbench.backends.base import Backend

KINDS = ("params_bytes", "grads_bytes", "optimizer_bytes")


def state_bytes(counts: dict) -> int | None:
    """Parameters + gradients + optimizer state of a `per_rank` count (or a report row holding KINDS); None where
    they were not counted (records from before memory_per_rank)."""
    return None if counts.get("params_bytes") is None else sum(counts[k] for k in KINDS)


def per_rank(model: nn.Module, optimizer, backend: Backend) -> dict[str, int | None]:
    """The largest rank's counts of what it holds (`backend.memory_held`: `held` where the parameters, their
    gradients and the optimizer's state show it all) and, on a GPU, its peak allocated bytes (a collective)."""
    import torch

    from distbench.backends.base import ReduceOp

    mine = backend.memory_held(model, optimizer)
    device = backend.device
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else -1
    values = torch.tensor([*(mine[k] for k in KINDS), peak], dtype=torch.float64, device=device)
    top = backend.all_reduce(values, ReduceOp.MAX).cpu().tolist()
    out: dict[str, int | None] = {k: int(v) if v >= 0 else None for k, v in zip(KINDS, top, strict=False)}
    out["peak_allocated_bytes"] = int(top[-1]) if top[-1] >= 0 else None
    return out
