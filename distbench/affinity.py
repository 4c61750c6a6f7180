"""CPU affinity: each process of a machine computes on its own cores.

With several processes on one CPU machine and no pinning, the scheduler moves the compute threads
between cores and lets them share one while another idles; every synchronous step then waits for the
slowest. Pinning each local process's compute thread(s) to a disjoint block of cores removes that
(measured in docs/performance.md). It is applied after the backend's setup, so the communication
threads the libraries start there (gloo's, Horovod's background thread) stay free to run on any core.
"""

from __future__ import annotations

import os


def pin_process(local_rank: int, local_world_size: int, threads: int) -> list[int] | None:
    """Pin the calling thread (and the threads it starts later, e.g. torch's intra-op pool) to cores
    [local_rank * threads, (local_rank + 1) * threads) of those this process may use. Returns the cores,
    or None where nothing is pinned: one process per machine, more threads than cores, or no affinity API."""
    if local_world_size < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    available = sorted(os.sched_getaffinity(0))
    if threads * local_world_size > len(available) or not 0 <= local_rank < local_world_size:
        return None
    cores = available[local_rank * threads : (local_rank + 1) * threads]
    os.sched_setaffinity(0, cores)
    return cores
