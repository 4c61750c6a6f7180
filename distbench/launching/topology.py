"""Simulated nodes: K nodes of P processes on one machine, each node on a share of the cores of its own.

A multi-node job on one host is started with each library's real multi-node launcher form: K torchrun agents
meeting at a c10d rendezvous, K `accelerate launch` with --num_machines/--machine_rank, one horovodrun with K
host names that resolve to this machine (Horovod runs a host whose address is local without ssh), K `deepspeed`
launches with --no_ssh and each its --node_rank, reading one hostfile (`deepspeed_hostfile`). What makes
it a stand-in for K machines is the cores: without a share each, every simulated node believes it has the whole
machine (threads per process = all cores / its local processes) and the nodes' threads fight for the same cores
(measured here, MNIST x2 on 2 cores: 2,027 samples/s for two torchrun agents, 184 for horovodrun, against about
3,000 for one node of two pinned processes).

The cores of every node travel in one variable, DISTBENCH_NODE_CORES ("0/1": node 0 has core 0, node 1 core 1;
nodes separated by "/"), and each process confines itself to its node's share before it starts its threads
(`confine`). That works for every launcher: horovodrun starts all nodes' processes from one driver, so they
cannot inherit a per-node affinity mask. The agents of torchrun and accelerate launch are also started under
`taskset`, so that the launcher itself runs on its node's share. Threads per process then follow from the share
(machine.default_threads), and several processes of one node pin within it (distbench/launching/affinity.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from distbench.errors import UserError
from distbench.launching.affinity import pin_threads
from distbench.launching.launch import DEEPSPEED, DeepSpeedLaunch, Horovodrun, Launcher, hostfile_lines
from distbench.process import LOOPBACK, LaunchEnv, free_port

NODE_CORES_ENV = "DISTBENCH_NODE_CORES"
# Horovod: host names that horovodrun runs without ssh because their address is this machine's (it counts hosts by
# name): localhost and 127.0.0.1 in any network namespace; beyond two, further loopback addresses (127.0.0.2, ...),
# which horovodrun finds local only where distbench has given them to the loopback of its private namespace
# (link.add_loopback_addresses), never the host's
HOROVOD_LOCAL_HOSTS = ("localhost", LOOPBACK)
HOROVOD_MAX_NODES = 254  # localhost, then 127.0.0.1 to 127.0.0.253


@dataclass(frozen=True)
class SimulatedNodes:
    """The cores of each simulated node: disjoint, equal shares of the cores this process may use."""

    node_cores: tuple[tuple[int, ...], ...]

    @classmethod
    def split(cls, nodes: int, available: list[int] | None = None, *, shared: bool = False) -> SimulatedNodes:
        """`shared`: nodes that compute nothing (--emulate) may share cores, one each in turn, where there are
        more nodes than cores; a node that computes needs a core of its own."""
        cores = sorted(available if available is not None else os.sched_getaffinity(0))
        if nodes <= 0:
            raise UserError(f"--nodes must be positive, got {nodes}")
        if nodes > len(cores) and shared:
            return cls(tuple((cores[i % len(cores)],) for i in range(nodes)))
        if nodes > len(cores):
            raise UserError(
                f"--nodes {nodes}: each simulated node needs a core of its own, and this process may use {len(cores)} "
                "(an --emulate run's nodes compute nothing and may share them)"
            )
        share = len(cores) // nodes
        return cls(tuple(tuple(cores[i * share : (i + 1) * share]) for i in range(nodes)))

    @property
    def nodes(self) -> int:
        return len(self.node_cores)

    def env_value(self) -> str:
        return "/".join(",".join(map(str, cores)) for cores in self.node_cores)

    @classmethod
    def parse(cls, value: str) -> SimulatedNodes:
        try:
            node_cores = tuple(tuple(int(c) for c in node.split(",")) for node in value.split("/"))
        except ValueError as e:
            raise UserError(f"{NODE_CORES_ENV}={value!r}: expected core lists per node such as 0,1/2,3") from e
        return cls(node_cores)


def confine(launch: LaunchEnv, env: Mapping[str, str] = os.environ) -> tuple[int, ...] | None:
    """Run this process, every thread of it, on its simulated node's cores; None when the job is not simulated."""
    value = env.get(NODE_CORES_ENV)
    if not value:
        return None
    sim = SimulatedNodes.parse(value)
    if launch.restart_count > 0 and launch.nodes < sim.nodes:
        # a job that continued without a node (torchrun's --nnodes 1:N): the node ranks were given anew, and this
        # process's node is the one whose cores its agent was started on (taskset), which it inherited
        cores = tuple(sorted(os.sched_getaffinity(0)))
        pin_threads(list(cores))
        return cores
    if sim.nodes != launch.nodes or not 0 <= launch.node_rank < sim.nodes:
        raise UserError(
            f"{NODE_CORES_ENV} describes {sim.nodes} simulated node(s), but {launch.launcher} started "
            f"this process as node {launch.node_rank} of {launch.nodes}"
        )
    cores = sim.node_cores[launch.node_rank]
    pin_threads(list(cores))
    return cores


def hosts(launcher: Launcher, nodes: int) -> list[str]:
    """The host names of `nodes` simulated nodes for this launcher: loopback for the agents' rendezvous; for
    horovodrun, distinct names (it counts hosts by name) that it runs locally: beyond two, loopback addresses that
    only a private network namespace has (`horovod_aliases`; LocalExecutor enters one and adds them)."""
    if not isinstance(launcher, Horovodrun):
        return [LOOPBACK] * nodes
    if nodes > HOROVOD_MAX_NODES:
        raise UserError(f"--nodes {nodes}: horovodrun can simulate at most {HOROVOD_MAX_NODES} nodes on one host")
    return [*HOROVOD_LOCAL_HOSTS[:nodes], *horovod_aliases(nodes)]


def horovod_aliases(nodes: int) -> list[str]:
    """The loopback addresses that horovodrun's hosts beyond the first two need on this machine (none up to two)."""
    return [f"127.0.0.{i}" for i in range(2, nodes)]


@dataclass(frozen=True)
class NodeLaunch:
    """The commands that start a simulated multi-node job (one per agent, or one for horovodrun) and the
    environment they share, as a user types them."""

    commands: list[list[str]]
    env: dict[str, str]

    def shell(self) -> str:
        """The commands as one shell line: each agent in the background, then wait."""
        prefix = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        lines = [" ".join([*prefix, *map(shlex.quote, cmd)]) for cmd in self.commands]
        return lines[0] if len(lines) == 1 else " & ".join(lines) + " & wait"


def node_launch(
    launcher: Launcher, program: list[str], nodes: int, nprocs: int, addrs: list[str] | None = None, inside=None
) -> NodeLaunch:
    """`program` as `nodes` simulated nodes of `nprocs` processes each, with the launcher's multi-node form,
    rendezvous on loopback (or at `addrs`, each node's own address); each agent under `taskset` on its node's cores,
    and `inside(i, cmd)` (each node's network namespace) around it when given. horovodrun, one command for every
    node, runs on the first."""
    sim = SimulatedNodes.split(nodes, shared=True)  # nodes that need cores of their own: Executor.check refused
    if launcher is DEEPSPEED:
        launcher = DeepSpeedLaunch(str(deepspeed_hostfile(nodes, nprocs)))
    launcher = discovering(launcher, addrs or hosts(launcher, nodes), nprocs)
    commands = launcher.commands(program, nprocs, addrs or hosts(launcher, nodes), free_port())
    if len(commands) == nodes:  # one agent per node: the agent (and so its workers) starts on the node's cores
        pairs = zip(commands, sim.node_cores, strict=True)
        commands = [["taskset", "-c", ",".join(map(str, cores)), *cmd] for cmd, cores in pairs]
    if inside is not None:
        commands = [inside(i, cmd) for i, cmd in enumerate(commands)]
    return NodeLaunch(commands, {NODE_CORES_ENV: sim.env_value(), **discovery_env(launcher)})


def deepspeed_hostfile(nodes: int, nprocs: int) -> Path:
    """The hostfile of `nodes` simulated nodes of `nprocs` processes each (node0, node1, ...: names that only key each
    node's slots under --no_ssh), written once in this machine's temporary folder, which every simulated node
    shares; the same job always reads the same file."""
    path = Path(tempfile.gettempdir()) / "distbench-deepspeed" / f"hostfile-{nodes}x{nprocs}"
    _write_once(path, hostfile_lines([f"node{i}" for i in range(nodes)], nprocs))
    return path


def discovering(launcher: Launcher, names: list[str], nprocs: int) -> Launcher:
    """`launcher`, or for Horovod Elastic, horovodrun with a discovery script of its own that lists `names` (nprocs
    slots each) while they live (`horovod_discovery`)."""
    if not isinstance(launcher, Horovodrun) or not launcher.restarts:
        return launcher
    return Horovodrun(launcher.restarts, str(horovod_discovery(names, nprocs)), launcher.takes_back)


HOROVOD_HOSTS_ENV = "DISTBENCH_HOROVOD_HOSTS"  # the live hosts file that a job's discovery script prints


def horovod_discovery(names: list[str], nprocs: int) -> Path:
    """Horovod Elastic's host discovery script for one job of these hosts (horovodrun runs it every second): it prints
    the job's hosts file (`name:slots` a line, as horovodrun reads them), which lists `names` at the start and loses a
    simulated node's line when that node goes (`drop_host`, by its kill-node fault), as a cluster's discovery drops a
    machine that is gone. Both in a folder of their own in this machine's temporary folder, removed after the job
    (`discarded`)."""
    folder = Path(tempfile.mkdtemp(prefix="distbench-horovod-"))
    hosts, script = folder / "hosts", folder / "discover.sh"
    _write_once(hosts, "".join(f"{line}\n" for line in host_slots(names, nprocs)))
    _write_once(script, f"#!/bin/sh\nexec cat {shlex.quote(str(hosts))}\n", mode=0o755)
    return script


def discovery_env(launcher: Launcher) -> dict[str, str]:
    """What the processes of a Horovod Elastic job are told of its hosts file (empty for any other launch)."""
    if not isinstance(launcher, Horovodrun) or not launcher.restarts:
        return {}
    return {HOROVOD_HOSTS_ENV: str(Path(launcher.discovery).with_name("hosts"))}


def drop_host(env: Mapping[str, str] = os.environ) -> None:
    """In a process of a Horovod Elastic job whose node goes: its host's line out of the job's hosts file (written
    whole: horovodrun may read it meanwhile). Nothing for any other job."""
    path, host = env.get(HOROVOD_HOSTS_ENV), env.get("HOROVOD_HOSTNAME")
    if not path or not host:
        return
    hosts, partial = Path(path), Path(f"{path}.{os.getpid()}")
    try:  # the job may be gone with its folder meanwhile: then there is nothing to update
        kept = [line for line in hosts.read_text().splitlines() if line.rsplit(":", 1)[0] != host]
        partial.write_text("".join(f"{line}\n" for line in kept))
        partial.replace(hosts)
    except OSError:
        partial.unlink(missing_ok=True)


def list_hosts(path: Path, lines: list[str]) -> None:
    """A Horovod Elastic job's hosts file listing `lines` (a lost node's back: sweep/node_return.py), written whole."""
    _write_once(path, "".join(f"{line}\n" for line in lines))


def discarded(env: Mapping[str, str]) -> None:
    """After a job: the folder of its hosts file and discovery script, if it had one."""
    if path := env.get(HOROVOD_HOSTS_ENV):
        shutil.rmtree(Path(path).parent, ignore_errors=True)


def discovery_script(names: list[str], nprocs: int) -> str:
    """The text of Horovod Elastic's host discovery script that lists `names`, `nprocs` slots each."""
    return "#!/bin/sh\n" + "".join(f"echo {shlex.quote(line)}\n" for line in host_slots(names, nprocs))


def host_slots(names: list[str], nprocs: int) -> list[str]:
    """Each host as Horovod Elastic's discovery lists it: `name:slots`."""
    return [f"{name}:{nprocs}" for name in names]


def _write_once(path: Path, text: str, mode: int = 0o644) -> None:
    """`text` at `path`, whole or not at all, whoever else writes it."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.chmod(mode)
    partial.replace(path)


def describe(launch: LaunchEnv, gathered: list[tuple[int, list[int]]], env: Mapping[str, str] = os.environ) -> dict:
    """The record's topology: node count, this process's node and local world size, the planned cores of each
    simulated node, and each rank's node and the cores it really ran on (`gathered`, in rank order)."""
    value = env.get(NODE_CORES_ENV)
    return {
        "nodes": launch.nodes,
        "node_rank": launch.node_rank,
        "local_world_size": launch.local_world_size,
        "simulated": bool(value) and not env.get("SLURM_JOB_ID"),  # under Slurm the nodes are real
        "node_cores": [list(c) for c in SimulatedNodes.parse(value).node_cores] if value else None,
        "rank_nodes": [node for node, _ in gathered],
        "rank_cores": [cores for _, cores in gathered],
    }
