"""Core pinning: disjoint blocks of cores per local process, and nothing pinned where it cannot help."""

import os

import pytest

from distbench import affinity


@pytest.fixture
def fake_cpus(monkeypatch):
    """Pretend this process may use cores 4-7; record what gets pinned."""
    pinned = {}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 6, 7}, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cores: pinned.update({pid: list(cores)}), raising=False)
    return pinned


@pytest.mark.parametrize("local_rank,world,threads,cores", [(0, 2, 2, [4, 5]), (1, 2, 2, [6, 7]), (3, 4, 1, [7])])
def test_each_local_process_gets_its_own_block(fake_cpus, local_rank, world, threads, cores):
    assert affinity.pin_process(local_rank, world, threads) == cores
    assert fake_cpus == {0: cores}


@pytest.mark.parametrize("local_rank,world,threads", [(0, 1, 4), (0, 2, 3), (0, 8, 1), (2, 2, 1)])
def test_nothing_is_pinned_where_blocks_do_not_fit(fake_cpus, local_rank, world, threads):
    # one process alone, more threads than cores, more processes than cores, a rank outside the world
    assert affinity.pin_process(local_rank, world, threads) is None
    assert fake_cpus == {}


def test_no_affinity_api(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    assert affinity.pin_process(0, 2, 1) is None
