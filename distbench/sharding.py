"""How samples are split across processes so that every backend and world size does the same work.

Training: one seeded permutation of the training set per epoch, the same on every rank. It is cut
into global batches of `global_batch` samples (a last partial global batch is dropped, so every
step has the same size at every world size); rank r takes the contiguous slice
[r * b, (r + 1) * b) of each global batch, b = global_batch / world_size. This is also the slice
Accelerate's `split_batches=True` gives each process, so the backends that shard through their
library and those that shard here see the same samples on the same rank.

Evaluation: rank r takes test indices r, r + N, r + 2N, ...: every sample exactly once, nothing
padded or duplicated, ranks may differ by one sample. Metrics are sums, all-reduced afterwards.

Accumulation: with --accumulate K, rank r's share of each global batch is cut into K contiguous
micro-batches of b / K samples (`micro_batches`), so that the K micro-batches of every rank together are
the same global batch as without accumulation.

Nothing here talks to other processes: rank and world size are passed in.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The global order of an epoch: the same for every rank, backend and world size."""
    g = torch.Generator()
    g.manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


class GlobalBatchSampler(Sampler[list[int]]):
    """Yields this rank's share of each global batch of one seeded epoch order.

    `batch_size` is the per-rank batch (global / world), the attribute name libraries such as
    Accelerate look for; `global_batch_size` is the global one.
    """

    def __init__(self, n: int, global_batch: int, rank: int = 0, world_size: int = 1, seed: int = 0):
        if global_batch <= 0 or global_batch % world_size:
            raise ValueError(f"global batch {global_batch} does not split evenly across {world_size} ranks")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of size {world_size}")
        if n < global_batch:
            raise ValueError(f"dataset of {n} samples is smaller than one global batch of {global_batch}")
        self.n, self.global_batch_size, self.rank, self.world_size, self.seed = n, global_batch, rank, world_size, seed
        self.batch_size = global_batch // world_size
        self.epoch = 0
        self.start_step = 0  # skip the first steps of the epoch (resume mid-epoch)

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        self.epoch, self.start_step = epoch, start_step

    def resplit(self, rank: int, world_size: int) -> None:
        """The same global batches, split across a world of another size (an elastic library's survivors): from the
        next iterator on, this rank's share of each."""
        if self.global_batch_size % world_size:
            raise ValueError(
                f"global batch {self.global_batch_size} does not split evenly across the {world_size} ranks left"
            )
        self.rank, self.world_size, self.batch_size = rank, world_size, self.global_batch_size // world_size

    def __len__(self) -> int:
        return self.n // self.global_batch_size - self.start_step

    def __iter__(self) -> Iterator[list[int]]:
        order = epoch_permutation(self.n, self.seed, self.epoch)
        lo = self.rank * self.batch_size
        for step in range(self.start_step, self.n // self.global_batch_size):
            start = step * self.global_batch_size + lo
            yield order[start : start + self.batch_size].tolist()


class EvalShardSampler(Sampler[list[int]]):
    """Batches of this rank's strided share of the test set: every sample once across ranks."""

    def __init__(self, n: int, batch_size: int, rank: int = 0, world_size: int = 1):
        self.n, self.batch_size = n, batch_size
        self.resplit(rank, world_size)

    def resplit(self, rank: int, world_size: int) -> None:
        """This rank's share in a world of another size (an elastic library's survivors)."""
        self.indices = list(range(rank, self.n, world_size))

    def __len__(self) -> int:
        return (len(self.indices) + self.batch_size - 1) // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for i in range(0, len(self.indices), self.batch_size):
            yield self.indices[i : i + self.batch_size]


def micro_batches(batch, k: int) -> list:
    """`batch` cut into k equal contiguous micro-batches along the sample dimension; tensors are cut, dicts,
    lists and tuples are cut element by element. k == 1: [batch] itself."""
    if k == 1:
        return [batch]
    if isinstance(batch, torch.Tensor):
        if len(batch) % k:
            raise ValueError(f"a batch of {len(batch)} samples does not split into {k} equal micro-batches")
        return list(batch.chunk(k))
    if isinstance(batch, dict):
        parts = {key: micro_batches(v, k) for key, v in batch.items()}
        return [{key: parts[key][i] for key in batch} for i in range(k)]
    if isinstance(batch, list | tuple):
        parts = [micro_batches(v, k) for v in batch]
        return [type(batch)(p[i] for p in parts) for i in range(k)]
    raise TypeError(f"cannot split a batch of type {type(batch).__name__} into micro-batches")
