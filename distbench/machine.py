"""Facts of the machine this process runs on: the CPUs it may use and the threads each process gets by default."""

from __future__ import annotations

import os


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (taskset, a cgroup cpuset, Slurm), not the
    machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_threads(local_world_size: int) -> int:
    """The CPUs this process may use divided among the processes of this machine, at least one each."""
    return max(1, available_cpus() // max(1, local_world_size))
