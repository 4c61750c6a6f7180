"""An in-memory dataset of pre-decoded tensors, fetched a whole batch at a time."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class TensorBatchDataset(Dataset):
    """Features decoded and normalised once at load time; `__getitems__` lets the DataLoader fetch a
    batch with one indexing operation instead of a Python loop over samples (the hot path)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        assert len(x) == len(y)
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices)
        return self.x[idx], self.y[idx]


def collate_tensor_batch(samples):
    """Collate for TensorBatchDataset: batches already come stacked from `__getitems__`."""
    if isinstance(samples, tuple):
        return samples
    xs, ys = zip(*samples, strict=True)
    return torch.stack(xs), torch.stack(ys)


def move_to(batch, device: torch.device):
    """A batch (tensors, or dicts, lists and tuples of them) on `device`; copies are non-blocking (from pinned memory
    on a GPU: asynchronous)."""
    if device.type == "cpu":
        return batch  # already there; skip walking the structure on the hot path
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: move_to(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(move_to(v, device) for v in batch)
    return batch
