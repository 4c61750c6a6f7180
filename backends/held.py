"""What a rank holds, counted from the tensors themselves (training/memory.py keeps the record's counts): the bytes of
tensors, each byte once however many views cover it, and the parameters, gradients and optimizer state of a model
and optimizer that keep it all in those three places (`held`: every backend's `memory_held` but DeepSpeed's)."""

from __future__ import annotations

import torch
from torch import nn


def tensors_in(obj) -> list[torch.Tensor]:
    """The tensors in `obj`: a tensor, or lists, tuples and dicts of them (a library's buffers), in order."""
    if torch.is_tensor(obj):
        return [obj]
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list | tuple) else ()
    return [t for item in items for t in tensors_in(item)]


def local(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of `t`: a DTensor's local shard, any other tensor whole."""
    return t.to_local() if hasattr(t, "to_local") else t


def state_tensors(optimizer) -> list[torch.Tensor]:
    """The tensors of a torch optimizer's state (Adadelta's two per parameter and its `step`, Adam's, ...)."""
    return [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]


def held(model: nn.Module, optimizer) -> dict[str, int]:
    """This rank's bytes of parameters, gradients (those that exist now) and optimizer state tensors."""
    params, states = list(model.parameters()), state_tensors(optimizer)
    counted: dict = {}
    return {
        "params_bytes": tensor_bytes([local(p) for p in params], counted),
        "grads_bytes": tensor_bytes([local(p.grad) for p in params if p.grad is not None], counted),
        "optimizer_bytes": tensor_bytes([local(v) for v in states], counted),
    }


def tensor_bytes(tensors, counted: dict[tuple[str, int], list[tuple[int, int]]]) -> int:
    """The bytes of `tensors`, each byte once: views into one buffer (a library's flat buffers hold many tensors)
    count the bytes they cover, however many views overlap there. Bytes already in `counted` (per buffer address,
    the byte ranges counted; updated) are not counted again."""
    total = 0
    for t in tensors:
        storage, size = t.untyped_storage(), t.numel() * t.element_size()
        if not size or not storage.nbytes():  # empty, or its storage freed (a library's released buffer)
            continue
        if _span(t) != size:  # a strided view with gaps: its own elements, not merged with other views
            total += size
            continue
        start = t.storage_offset() * t.element_size()
        total += _add_range(counted.setdefault((t.device.type, storage.data_ptr()), []), start, start + size)
    return total


def _span(t: torch.Tensor) -> int:
    """The bytes from a tensor's first element to the end of its last (its numel's worth where it is dense, in any
    order of its dimensions)."""
    return (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))) * t.element_size()


def _add_range(ranges: list[tuple[int, int]], start: int, end: int) -> int:
    """Add [start, end) to `ranges` (kept disjoint and sorted); returns how many of its bytes were new."""
    before = sum(b - a for a, b in ranges)
    ranges[:] = _merged([*ranges, (start, end)])
    return sum(b - a for a, b in ranges) - before


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
