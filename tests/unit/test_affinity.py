"""Core pinning (distbench/launching/affinity.py): each local process on its own block of cores, threads included."""

import os

import pytest

from distbench.launching import affinity


@pytest.fixture
def fake_cpus(monkeypatch):
    """Pretend this process may use cores 4-7 and has threads 0 (the caller), 11 and 12; record what gets
    pinned."""
    pinned = {}
    monkeypatch.setattr(affinity, "_thread_ids", lambda: [11, 12])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 6, 7}, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cores: pinned.update({pid: list(cores)}), raising=False)
    return pinned


@pytest.mark.parametrize("local_rank,world,threads,cores", [(0, 2, 2, [4, 5]), (1, 2, 2, [6, 7]), (3, 4, 1, [7])])
def test_each_local_process_gets_its_own_block(fake_cpus, local_rank, world, threads, cores):
    assert affinity.pin_process(local_rank, world, threads) == cores
    assert fake_cpus == {0: cores, 11: cores, 12: cores}  # the communication threads too


@pytest.mark.parametrize("local_rank,world,threads", [(0, 1, 4), (0, 2, 3), (0, 8, 1), (2, 2, 1)])
def test_nothing_is_pinned_where_blocks_do_not_fit(fake_cpus, local_rank, world, threads):
    # one process alone, more threads than cores, more processes than cores, a rank outside the world
    assert affinity.pin_process(local_rank, world, threads) is None
    assert fake_cpus == {}


def test_no_affinity_api(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    assert affinity.pin_process(0, 2, 1) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_threads_started_before_and_after_pinning_share_the_cores():
    """For real, in a child process: a thread that exists before the call (as gloo's workers do after
    the backend's setup) and one started after it both run on the pinned core only."""
    import subprocess
    import sys

    code = """
import os, threading
from distbench.launching.affinity import pin_process
ids, stop = [], threading.Event()
def idle():
    ids.append(threading.get_native_id()); stop.wait()
before = threading.Thread(target=idle); before.start()
cores = pin_process(1, 2, 1)
after = threading.Thread(target=idle); after.start()
while len(ids) < 2: pass
print(cores, [sorted(os.sched_getaffinity(t)) for t in ids])
stop.set()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    core = sorted(os.sched_getaffinity(0))[1]
    assert out.stdout.split() == [f"[{core}]", f"[[{core}],", f"[{core}]]"]
