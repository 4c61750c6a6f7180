"""How samples split across ranks (distbench/sharding.py): global batches, evaluation shards, micro-batches."""

import pytest
import torch

from distbench.sharding import EvalShardSampler, GlobalBatchSampler, epoch_permutation, micro_batches


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("n,global_batch", [(100, 12), (97, 12), (4500, 60)])
def test_each_global_batch_is_split_evenly_and_no_sample_repeats(n, global_batch, world):
    samplers = [GlobalBatchSampler(n, global_batch, r, world, seed=3) for r in range(world)]
    per_rank = [list(s) for s in samplers]
    steps = n // global_batch
    assert all(len(batches) == steps == len(s) for batches, s in zip(per_rank, samplers, strict=True))
    reference = list(GlobalBatchSampler(n, global_batch, 0, 1, seed=3))
    seen = []
    for step in range(steps):
        shares = [per_rank[r][step] for r in range(world)]
        assert all(len(share) == global_batch // world for share in shares)
        # the union of the ranks' shares, in rank order, is the world-size-1 batch: same optimisation step
        assert sum(shares, []) == reference[step]
        seen += sum(shares, [])
    assert len(seen) == len(set(seen)) == steps * global_batch  # nothing seen twice
    # the only samples not seen are the documented drop of the last partial global batch
    assert n - len(seen) == n % global_batch


def test_order_depends_on_seed_and_epoch_only():
    a = GlobalBatchSampler(50, 10, 0, 1, seed=1)
    b = GlobalBatchSampler(50, 10, 0, 1, seed=1)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    assert list(GlobalBatchSampler(50, 10, 0, 1, seed=2)) != first
    assert torch.equal(epoch_permutation(50, 1, 0), epoch_permutation(50, 1, 0))


def test_resume_mid_epoch_continues_the_same_order():
    s = GlobalBatchSampler(60, 6, 1, 2, seed=5)
    s.set_epoch(2)
    full = list(s)
    s.set_epoch(2, start_step=4)
    assert list(s) == full[4:]


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("n", [500, 1066, 7])
def test_eval_shards_cover_every_test_sample_exactly_once(n, world):
    indices = [i for r in range(world) for batch in EvalShardSampler(n, 64, r, world) for i in batch]
    assert sorted(indices) == list(range(n))


def test_invalid_splits_are_refused():
    with pytest.raises(ValueError):
        GlobalBatchSampler(100, 10, 0, 3)
    with pytest.raises(ValueError):
        GlobalBatchSampler(5, 10, 0, 1)


def test_micro_batches_cut_every_part_of_a_batch():
    x, y = torch.arange(8).reshape(8, 1), torch.arange(8)
    parts = micro_batches((x, y), 4)
    assert [p[1].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(isinstance(p, tuple) and p[0].shape == (2, 1) for p in parts)
    d = micro_batches({"input_ids": x, "labels": y}, 2)
    assert [p["labels"].tolist() for p in d] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert micro_batches((x, y), 1)[0] is not None and len(micro_batches((x, y), 1)) == 1
    with pytest.raises(ValueError, match="does not split into 3 equal micro-batches"):
        micro_batches(y, 3)


def test_a_world_that_shrinks_splits_the_same_global_batches_over_the_ranks_left():
    """Horovod Elastic's survivors (backends.base.Backend.resized): the global batch is kept, each rank's share of it
    grows; the test set is shared out again, every sample once."""
    samplers = [GlobalBatchSampler(120, 12, r, 4, seed=3) for r in range(4)]
    reference = list(GlobalBatchSampler(120, 12, 0, 1, seed=3))
    for rank, s in enumerate(samplers[:2]):
        s.resplit(rank, 2)
        s.set_epoch(0, start_step=3)
    assert [a + b for a, b in zip(*samplers[:2], strict=True)] == reference[3:]
    with pytest.raises(ValueError, match="does not split evenly across the 5 ranks left"):
        samplers[0].resplit(0, 5)
    shards = [EvalShardSampler(10, 4, r, 3) for r in range(3)]
    for rank, s in enumerate(shards[:2]):
        s.resplit(rank, 2)
    assert sorted(i for s in shards[:2] for batch in s for i in batch) == list(range(10))
