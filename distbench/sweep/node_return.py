"""A lost node that comes back (`--fault kill-node:NODE@STEP:BACK`), played by the executor as a cluster plays a
repaired machine: BACK seconds after the node went, it is back in service as it was first, and the job grows again
where its library takes a node in.

A launcher with an agent per node (torchrun's, which ddp, fsdp, deepspeed and fabric continue under; accelerate
launch's): the node went when its agent was killed (SIGKILL: the fault kills the node's agent, then its workers); the
same command is started again (its cores, its network namespace), with `NODE_RETURNED_ENV` set (`NodeReturn`).
torchrun's agents that kept the job take the waiting node in at their next check (a membership change, not one of
--max-restarts) and restart the group at the larger size from the last checkpoint. horovodrun, one process for every
node (`HostReturn`): the node went when its line left the job's hosts file (its fault drops it, as a cluster's
discovery drops a machine that is gone); the line is put back, and horovodrun, once the host's blacklist cool-down is
over (--blacklist-cooldown-range, given for such a job), starts a worker there, which Horovod Elastic's workers take in
at their next commit.

The run's processes learn that a node may come back from `NODE_RETURNS_ENV` (a launch of their own cannot start a
node again: training/faults.py refuses the fault there).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from distbench.config import parse_fault
from distbench.launching import topology
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


@dataclass
class HostReturn:
    """One Horovod Elastic job's lost host, BACK seconds after it went: its line back in the job's hosts file. The
    node is the host that the fault's rank ran on, which need not be the NODE-th line: horovodrun's driver orders the
    hosts it first assigns as a set (horovod/runner/elastic/discovery.py, order_available_hosts), so rank 0 may run on
    any host listed. The fault drops its own host's line (topology.drop_host, by HOROVOD_HOSTNAME): whichever line
    leaves the file is the lost node's."""

    node: int
    after_s: float
    hosts: Path  # the file the job's discovery script prints (topology.horovod_discovery)
    listed: list[str]  # its lines at the start: every node's
    gone_at: float | None = None  # when the executor saw a line gone (time.monotonic)
    listed_again: bool = False

    def poll(self, procs: list[subprocess.Popen], start: Callable[[list[str], dict], subprocess.Popen]) -> None:
        """Called as the executor waits for the job's processes (horovodrun starts the node's worker itself): when
        a line has left the hosts file, note the time; BACK seconds later, list every node again."""
        if self.listed_again:
            return
        if self.gone_at is None:
            try:
                if set(self.listed) - set(self.hosts.read_text().splitlines()):
                    self.gone_at = time.monotonic()
            except OSError:  # the job is gone with its folder: nothing comes back to it
                pass
            return
        if time.monotonic() - self.gone_at >= self.after_s:
            topology.list_hosts(self.hosts, self.listed)
            self.listed_again = True


LostNode = NodeReturn | HostReturn  # how the executor plays its return, by launcher


def returns(fault_text: str | None) -> bool:
    """Whether `fault_text` asks for a lost node to come back."""
    fault = parse_fault(fault_text)
    return fault is not None and fault.returns


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
    if isinstance(launcher, Horovodrun) and launcher.restarts < 2:
        # Horovod: the driver counts a host's return as a reset, as it does the failure (--reset-limit)
        return (
            f"--fault {fault_text}: under Horovod Elastic a host that comes back is one of its resets, as the lost "
            f"node was, and --restarts {launcher.restarts} (its --reset-limit) would end the job at the return; give "
            "--restarts 2 or more"
        )
    return None


def node_return(fault_text: str | None, commands: list[list[str]], env: Mapping[str, str]) -> LostNode | None:
    """The lost node's return that `fault_text` asks for, for a job started by `commands` (one per node's agent, or
    horovodrun's one, checked by `return_error`) with `env`; None where it asks for none."""
    fault = parse_fault(fault_text)
    if fault is None or not fault.returns:
        return None
    if hosts := env.get(topology.HOROVOD_HOSTS_ENV):  # Horovod Elastic: its discovery lists the node again
        return HostReturn(fault.rank, fault.seconds, Path(hosts), Path(hosts).read_text().splitlines())
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
