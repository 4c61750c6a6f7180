"""A lost node that comes back (`--fault kill-node:NODE@STEP:BACK`), played by the executor as a cluster plays a
repaired machine: BACK seconds after the node went, it is started again as it was first started, and the job grows
again where its library takes a node in.

A launcher with an agent per node (torchrun's, which ddp, fsdp, deepspeed and fabric continue under; accelerate
launch's): the node went when its agent was killed (SIGKILL: the fault kills the node's agent, then its workers); the
same command is started again (its cores, its network namespace), with `NODE_RETURNED_ENV` set. torchrun's agents that
kept the job take the waiting node in at their next check (a membership change, not one of --max-restarts) and restart
the group at the larger size from the last checkpoint. horovodrun, one process for every node: refused
(`return_error`).

The run's processes learn that a node may come back from `NODE_RETURNS_ENV` (a launch of their own cannot start a
node again: training/faults.py refuses the fault there).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from distbench.config import parse_fault
from distbench.launching.launch import Horovodrun, Launcher
from distbench.process import NODE_RETURNED_ENV, NODE_RETURNS_ENV


@dataclass
class NodeReturn:
    """One job's lost node, BACK seconds after it went: its agent's command started again."""

    node: int
    after_s: float
    command: list[str]
    gone_at: float | None = None  # when the executor saw its agent killed (time.monotonic)
    started: subprocess.Popen | None = None

    def poll(self, procs: list[subprocess.Popen], start: Callable[[list[str], dict], subprocess.Popen]) -> None:
        """Called as the executor waits for the job's processes (`procs`, one per node's agent, in node order): when
        the node's agent has been killed, note the time; BACK seconds later, `start` its command again (with
        NODE_RETURNED_ENV) and add it to `procs`."""
        if self.started is not None:
            return
        if self.gone_at is None:
            if procs[self.node].poll() == -signal.SIGKILL:
                self.gone_at = time.monotonic()
            return
        if time.monotonic() - self.gone_at >= self.after_s:
            self.started = start(self.command, {NODE_RETURNED_ENV: "1"})
            procs.append(self.started)


def return_error(fault_text: str, launcher: Launcher | None) -> str | None:
    """Why a lost node cannot come back to a job that `launcher` continues (None: a launcher that does not, the
    job started without --restarts); None where it can, or where `fault_text` asks for no return."""
    fault = parse_fault(fault_text)
    if fault is None or not fault.returns:
        return None
    if launcher is None:
        return (
            f"--fault {fault_text}: node {fault.rank} comes back to a job that continued without it; give --restarts "
            "N (each library continues as its users run it) or kill-node without a return"
        )
    if isinstance(launcher, Horovodrun):
        # Horovod: Horovod Elastic takes a host back where its discovery lists it again once its blacklist cool-down
        # (--blacklist-cooldown-range) is over, and starts a new worker there that syncs rank 0's state; distbench's
        # start-up (its collectives: the gathering of the ranks' cores, prepare's broadcast) would have that
        # worker wait for collectives the workers under way do not make
        return (
            f"--fault {fault_text}: Horovod Elastic taking a host back is not measured yet (a new worker's start-up "
            "collectives would wait for the workers under way: docs/faults.md); give kill-node without a return"
        )
    return None


def node_return(fault_text: str | None, commands: list[list[str]]) -> NodeReturn | None:
    """The lost node's return that `fault_text` asks for, for a job started by `commands` (one per node's agent,
    checked by `return_error`); None where it asks for none."""
    fault = parse_fault(fault_text)
    if fault is None or not fault.returns:
        return None
    return NodeReturn(fault.rank, fault.seconds, commands[fault.rank])


# torchrun: with the rendezvous' TCPStore shared with the workers (torch's default since 2.5), an agent keeps the
# store's address from its first round; a node that joins a job under way builds it afresh, and unless it is the new
# round's rank 0 it waits for the address under this round's keys, which rank 0's agent never writes again
# (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, next_rendezvous): after 60 s every agent fails and the
# job ends (measured: docs/faults.md). torch's own opt-out makes rank 0 publish it every round.
NOT_SHARED = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def returned_env(env: dict[str, str]) -> dict[str, str]:
    """The job's environment, telling its processes that the executor starts a lost node again, and torchrun's
    agents to take a node in (NOT_SHARED)."""
    return {**env, NODE_RETURNS_ENV: "1", **NOT_SHARED}
