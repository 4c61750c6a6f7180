"""Per-node links: each simulated node in a network namespace of its own, all joined by one bridge, each node's link
a veth pair with a token bucket on both ends: a full-duplex NIC of RATE each way on a non-blocking switch.

    switch (the command's private namespace, link.py)        node i (a namespace of its own, `ip netns add`)
    bridge dbsw --- veth sw<i> ==[tbf RATE each way]== veth eth0 (10.77.0.<i+1>/24) + lo

The shared mode of link.py (one token bucket on loopback) models a hub: every byte of every rank, both directions,
through one queue of RATE. This one models a cluster's switch: each node sends at RATE and receives at RATE at once,
and the processes of one node talk over its own loopback, unshaped, as on a real machine. Latency is not added
(netem is missing on the kernel this was built on); tbf's queue adds at most link.LATENCY_MS when a link is full.

horovodrun runs once, in the switch's namespace, on host names that it starts without ssh (topology.hosts); each of
its workers enters its node's namespace first (`horovod_worker`). Horovod: horovodrun, seeing only local host names,
tells its workers to meet at its rendezvous on 127.0.0.1 over `lo`; the wrapper gives them the switch's address
(HEAD_ADDR, the head node's address on the bridge) and their node's eth0 instead, through the same variables
(HOROVOD_GLOO_RENDEZVOUS_ADDR, HOROVOD_GLOO_IFACE) that horovodrun sets for a cluster's NIC. Horovod 0.28 ignores
HOROVOD_GLOO_IFACE for its process-set contexts (GlooContext::InitializeForProcessSet creates its device from an
iface it never set) and binds them to the address of the machine's host name; so each node's namespace gets the
hosts file of a cluster's node, its host name at its own address (/etc/netns/NS/hosts, which `ip netns exec` mounts
over /etc/hosts; removed with the namespace).

Everything is made inside the command's private network namespace (link.enter_private_namespace) and in
namespaces it creates, named dbn-<pid>-<i> after the process that made them; `down` deletes them (their veths go
with them), and `up` first deletes those whose process is gone (a run killed with SIGKILL cannot clean up; named
namespaces outlive it). The host's interfaces are never touched: every change runs only inside the private
namespace (link._tc's guard).

`--fault link-down:NODE@STEP:SECONDS` takes node NODE's switch port down (`ip link set sw<NODE> down` in the switch's
namespace) and up again SECONDS later, as a cable pulled or a switch port that fails and comes back: the node's eth0
loses its carrier, every packet to and from the node is lost meanwhile, and TCP retransmits as it would on a
cluster, backing off; nothing tells the processes, which keep their sockets. The node's first process does it
(training/faults.py), entering the switch's namespace that the run names (SWITCH_NETNS_ENV).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from distbench.launching import link

SUBNET = "10.77.0."  # addresses that exist only inside the namespaces a run creates
IFACE = "eth0"  # each node's interface, named alike in every node (GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE)
BRIDGE = "dbsw"
# how long a packet may wait in a node's queue: a switch port's shallow buffer. With loopback's 100 ms (link.py) the
# acknowledgements of one direction wait behind 100 ms of the other's data, and a transfer each way at once took
# 0.1 s longer than one alone (docs/commbench.md)
QUEUE_MS = 10
# how much a node may send at once above its rate: a NIC has no such allowance; 1 ms of traffic (and at least one
# 64 KiB segment, link.MIN_BURST) is what tbf needs to keep the rate. With loopback's 10 ms (link.py) a 1 Gbit/s link
# passed a 1 MiB message at 148 MB/s, faster than the link, whenever the bucket had filled between messages.
BURST_MS = 1
ETC_NETNS = Path("/etc/netns")  # ip-netns(8): files under NAME/ are mounted over /etc/ inside namespace NAME
HEAD_ADDR = f"{SUBNET}254"  # the switch's own address: where horovodrun (and its rendezvous) runs
SWITCH_NETNS_ENV = "DISTBENCH_SWITCH_NETNS"  # the switch's namespace, /proc/PID/ns/net of the process that made it


def node_addr(i: int) -> str:
    return f"{SUBNET}{i + 1}"


def reap_orphans() -> None:
    """Delete the node namespaces (and hosts files) of runs whose process is gone."""
    listed = link._tc("ip", "netns", "list", check=False).stdout.split()
    for name in listed:
        m = re.fullmatch(r"dbn-(\d+)-\d+", name)
        if m and not _alive(int(m[1])):
            link._tc("ip", "netns", "del", name, check=False)
            shutil.rmtree(ETC_NETNS / name, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class NodeNetwork:
    """K node namespaces on a switch, each link at `rate` each way; `up()` makes them, `down()` removes them."""

    nodes: int
    rate: str
    tag: str = field(default_factory=lambda: str(os.getpid()))
    made: list[str] = field(default_factory=list)

    def ns(self, i: int) -> str:
        return f"dbn-{self.tag}-{i}"

    def up(self) -> NodeNetwork:
        reap_orphans()
        bits = link.parse_rate(self.rate)
        link._tc("ip", "link", "set", "lo", "up")
        link._tc("ip", "link", "add", BRIDGE, "type", "bridge")
        link._tc("ip", "link", "set", BRIDGE, "up")
        link._tc("ip", "addr", "add", f"{HEAD_ADDR}/24", "dev", BRIDGE)
        for i in range(self.nodes):
            self._node(i, bits)
        return self

    def _node(self, i: int, bits: float | None) -> None:
        ns, switch_end = self.ns(i), f"sw{i}"
        link._tc("ip", "netns", "add", ns)
        self.made.append(ns)
        self._hosts_file(i)
        link._tc("ip", "link", "add", switch_end, "type", "veth", "peer", "name", f"n{i}{self.tag}")
        link._tc("ip", "link", "set", f"n{i}{self.tag}", "netns", ns)
        link._tc("ip", "link", "set", switch_end, "master", BRIDGE)
        link._tc("ip", "link", "set", switch_end, "up")
        inside = ["ip", "netns", "exec", ns]
        link._tc(*inside, "ip", "link", "set", f"n{i}{self.tag}", "name", IFACE)
        link._tc(*inside, "ip", "addr", "add", f"{node_addr(i)}/24", "dev", IFACE)
        link._tc(*inside, "ip", "link", "set", IFACE, "up")
        link._tc(*inside, "ip", "link", "set", "lo", "up")
        if bits is not None:  # the node's egress (what it sends) and the switch port's (what it receives)
            nic = link.tbf_args(bits, mtu=1500, latency_ms=QUEUE_MS, burst_ms=BURST_MS)
            link._tc(*inside, "tc", "qdisc", "replace", "dev", IFACE, "root", *nic)
            link._tc("tc", "qdisc", "replace", "dev", switch_end, "root", *nic)

    def _hosts_file(self, i: int) -> None:
        """Node i's /etc/hosts, as on a cluster: this machine's host name is the node's own address there."""
        folder = ETC_NETNS / self.ns(i)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text(f"127.0.0.1 localhost\n{node_addr(i)} {socket.gethostname()}\n")

    def down(self) -> None:
        # each node's veth pair by its switch end first: deleting one end deletes both at once, where a namespace's
        # deletion frees the end inside it only when the kernel's cleanup gets to it, later: a next up() in this
        # process (the bridge's measurement, then the run) met the old pair's names ("File exists")
        for i in range(len(self.made)):
            link._tc("ip", "link", "del", f"sw{i}", check=False)
        for ns in self.made:
            link._tc("ip", "netns", "del", ns, check=False)
            shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
        with contextlib.suppress(OSError):
            ETC_NETNS.rmdir()  # only if no other run's namespaces are left in it
        link._tc("ip", "link", "del", BRIDGE, check=False)
        self.made.clear()

    def wrap(self, i: int, cmd: list[str]) -> list[str]:
        """`cmd` run inside node i's namespace."""
        return ["ip", "netns", "exec", self.ns(i), *cmd]

    def horovod_worker(self, program: list[str]) -> list[str]:
        """`python PROGRAM` as each of horovodrun's workers runs it: inside the namespace of its node (Horovod's cross
        rank), meeting the others at the switch's address over its node's eth0."""
        # Horovod: the variables are set after horovodrun's (which name 127.0.0.1 and lo) and before the worker reads
        # them; "$@" is `python PROGRAM`, left for resolve() to give this environment's python.
        script = (
            f'exec ip netns exec "dbn-{self.tag}-$HOROVOD_CROSS_RANK" env HOROVOD_GLOO_RENDEZVOUS_ADDR={HEAD_ADDR} '
            f'HOROVOD_GLOO_IFACE={IFACE} "$@"'
        )
        return ["sh", "-c", script, "sh", "python", *program]

    def env(self) -> dict[str, str]:
        """The libraries' interface for traffic between nodes: each node's own eth0, not the loopback that a host
        name might resolve to; and where the switch is, for a link-down fault."""
        said = {"GLOO_SOCKET_IFNAME": IFACE, "HOROVOD_GLOO_IFACE": IFACE, "NCCL_SOCKET_IFNAME": IFACE}
        return {**said, SWITCH_NETNS_ENV: f"/proc/{os.getpid()}/ns/net"}


def switch() -> str | None:
    """The switch's namespace where this process runs on a node of a per-node network (inside distbench's private
    namespaces, and never the one the command was started in); else None."""
    path = os.environ.get(SWITCH_NETNS_ENV)
    if not path or not link.inside() or not Path(f"/sys/class/net/{IFACE}").exists():
        return None
    try:
        target = os.readlink(path)
    except OSError:  # the process that made the switch is gone
        return None
    return target if target != os.environ.get(link.OUTER_NETNS_ENV) else None


def link_down(node: int, seconds: float) -> None:
    """Node `node`'s switch port down now, and up again `seconds` later (a detached shell does it, so that the link
    comes back whatever becomes of this process). Called on the node, inside the run's namespaces only."""
    if switch() is None:
        raise RuntimeError("refusing to take a link down outside a per-node network distbench made")
    ip, enter = link._tool("ip"), [link._tool("nsenter"), f"--net={os.environ[SWITCH_NETNS_ENV]}"]
    port = f"sw{node}"
    subprocess.run([*enter, ip, "link", "set", port, "down"], check=True, capture_output=True)
    later = f"sleep {seconds:g}; exec {shlex.join([*enter, ip, 'link', 'set', port, 'up'])}"
    subprocess.Popen(
        ["sh", "-c", later],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
