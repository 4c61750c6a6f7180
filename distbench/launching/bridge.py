"""What this host's bridge carries for all simulated nodes together (netns.py): every node sending to the next at
once over TCP, unshaped (a ring, as a ring all-reduce sends), the bytes they moved over the time the slowest took.

An emulated cluster (--emulate) runs many nodes' communication on one host; its links, at their rate / the dilation,
must add up to no more than the host carries, or the host, not the links, sets the pace. The sweep's check
(sweep/executor.py) measures the capacity once per machine and node count, keeps it in the product cache, and
refuses per-node links that would need more than USABLE_SHARE of it. `python -m benchmarks.linkcheck bridge` tables
it (docs/emulation.md).

    python -m distbench.launching.bridge recv|send --addr A --port P --nbytes N   # one end of one transfer
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from distbench.errors import UserError
from distbench.launching import link
from distbench.records import write_json

# gloo's all-reduce costs the host more than the bytes a raw TCP ring moves (its copies and reductions, the
# libraries' threads): an emulation may plan on half of the measured aggregate
USABLE_SHARE = 0.5
RING_MB = 8  # each node's transfer: long enough that the connections' set-up is lost in it (2-5 ms here)
REPEATS = 2  # the check wants the order of magnitude (it allows half): the median of two rings
CACHE_FILE = "bridge-capacity.json"
HERE = Path(__file__).resolve().parents[2]  # the checkout, where `python -m distbench...` finds the package


def transfer(role: str, addr: str, port: int, nbytes: int) -> None:
    """One end of a TCP transfer of nbytes: `recv` listens on addr:port, reads them all and acknowledges; `send`
    connects, writes them and prints the seconds until the acknowledgement."""
    if role == "recv":
        with socket.create_server((addr, port)) as server:
            print("ready", flush=True)
            conn, _ = server.accept()
            with conn:
                left = nbytes
                while left:
                    left -= len(conn.recv(min(left, 1 << 20)))
                conn.sendall(b"k")
        return
    payload = bytes(nbytes)
    with socket.create_connection((addr, port), timeout=120) as conn:
        t0 = time.perf_counter()
        conn.sendall(payload)
        conn.recv(1)
        print(time.perf_counter() - t0, flush=True)


def transfers(net, directions: list[tuple[int, int]], nbytes: int) -> list[float]:
    """The given transfers (from node, to node) at once, each between the nodes' own addresses: their seconds."""
    from distbench.launching.netns import node_addr

    py = [sys.executable, "-m", "distbench.launching.bridge"]
    receivers, senders = [], []
    for k, (src, dst) in enumerate(directions):
        args = ["--addr", node_addr(dst), "--port", str(29900 + k), "--nbytes", str(nbytes)]
        recv = subprocess.Popen(net.wrap(dst, [*py, "recv", *args]), cwd=HERE, stdout=subprocess.PIPE, text=True)
        recv.stdout.readline()  # "ready"
        receivers.append(recv)
        senders.append((src, args))
    started = [
        subprocess.Popen(net.wrap(src, [*py, "send", *args]), cwd=HERE, stdout=subprocess.PIPE, text=True)
        for src, args in senders
    ]
    seconds = [float(p.communicate(timeout=300)[0]) for p in started]
    for r in receivers:
        r.wait(timeout=60)
    return seconds


def ring_rates(nodes: int, mb: float = RING_MB, repeats: int = REPEATS) -> list[float]:
    """`nodes` node namespaces on unshaped per-node links, each sending `mb` MB to the next at once: the aggregate
    bits/s of each repeat. Inside a private network namespace (link.enter_private_namespace), as every per-node run."""
    from distbench.launching.netns import NodeNetwork

    nbytes = int(mb * 1e6)
    net = NodeNetwork(nodes, link.UNSHAPED).up()
    try:
        ring = [(i, (i + 1) % nodes) for i in range(nodes)]
        return [nodes * nbytes * 8 / max(transfers(net, ring, nbytes)) for _ in range(repeats)]
    finally:
        net.down()


def _key(nodes: int) -> str:
    return f"{socket.gethostname()} {platform.release()} {len(os.sched_getaffinity(0))} cores {nodes} nodes"


def capacity(nodes: int) -> dict:
    """This host's aggregate across `nodes` namespaces, bits/s, and when it was measured: from the product cache, or
    measured now (a few seconds) and kept there."""
    from distbench.data.download import cache_dir

    path = cache_dir() / CACHE_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if _key(nodes) not in known:
        print(f"measuring what this host's bridge carries across {nodes} nodes ...", file=sys.stderr, flush=True)
        rates = ring_rates(nodes)
        known[_key(nodes)] = {"bits_per_s": statistics.median(rates), "measured": datetime.now(UTC).date().isoformat()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        write_json(tmp, known, indent=1, sort_keys=True)
        tmp.replace(path)  # whole or not at all: another run may read it
    return known[_key(nodes)]


def check(nodes: int, rate: str, dilation: float) -> None:
    """Refuse, in one line, `nodes` emulated nodes whose per-node links at `rate` / `dilation` need more than
    USABLE_SHARE of what the bridge carries."""
    bits = link.parse_rate(rate)
    if bits is None:
        return
    need = nodes * bits / dilation
    cap = capacity(nodes)
    if need > USABLE_SHARE * cap["bits_per_s"]:
        least = nodes * bits / (USABLE_SHARE * cap["bits_per_s"])
        raise UserError(
            f"{nodes} emulated nodes on {rate} links need {need / 1e9:.3g} Gbit/s through this host's bridge, which "
            f"carries {cap['bits_per_s'] / 1e9:.3g} Gbit/s across {nodes} namespaces (measured {cap['measured']}; an "
            f"emulation may use {USABLE_SHARE:.0%} of it): give --dilation {least:.3g} or more"
        )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m distbench.launching.bridge")
    parser.add_argument("role", choices=("recv", "send"))
    parser.add_argument("--addr", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nbytes", type=int, required=True)
    a = parser.parse_args()
    transfer(a.role, a.addr, a.port, a.nbytes)
