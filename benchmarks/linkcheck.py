"""Is the shaped link real? A gloo all-reduce of S bytes between 2 processes, timed on each link rate; and is a
per-node link full-duplex?

    python -m benchmarks.linkcheck check [--rates none,1gbit,100mbit] [--mb 4] [--repeats 5] [--out docs/network.md]
    python -m benchmarks.linkcheck duplex [--rate 100mbit] [--mb 4] [--repeats 3] [--out docs/commbench.md]
    python -m benchmarks.linkcheck bridge [--nodes 2,4,8,16] [--mb 20] [--repeats 3] [--out docs/emulation.md]

Runs in a private network namespace (distbench/launching/link.py), as `compare --link-rate` does. For each rate,
torchrun starts 2 processes that all-reduce a float32 tensor of --mb MB --repeats times (after one untimed) and count
the bytes each writes to its sockets meanwhile (/proc/self/io). Every one of those bytes crosses the shaped
loopback, so an all-reduce cannot take less than (bytes written by both ranks) / rate: the "floor" column. A
shaped link is real when each measured time is at or above its floor, and an unshaped one runs far faster
than the slowest rate's floor. With --out, the table replaces its section of that file.
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT
from distbench.launching import link
from distbench.launching.bridge import ring_rates, transfers
from distbench.launching.launch import TORCHRUN, local_argv, resolve
from distbench.training.timer import written_bytes

SECTION = "## Is the shaping real? A gloo all-reduce on each link"
DUPLEX_SECTION = "## Is a per-node link full-duplex? One transfer alone, then one each way at once"


def worker(mb: float, repeats: int) -> None:
    """One of the 2 processes (torchrun); rank 0 prints one JSON line: seconds per all-reduce, bytes written."""
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(int(mb * 2**20 / 4))
    dist.all_reduce(t)  # connections set up, buffers allocated: not timed
    seconds, written = [], []
    for _ in range(repeats):
        dist.barrier()
        w0, t0 = written_bytes(), time.perf_counter()
        dist.all_reduce(t)
        seconds.append(time.perf_counter() - t0)
        written.append(written_bytes() - w0)
    both = torch.tensor(written, dtype=torch.float64)
    dist.all_reduce(both)  # the bytes both ranks wrote, per all-reduce
    if dist.get_rank() == 0:
        print(json.dumps({"seconds": seconds, "bytes_both_ranks": both.tolist()}))
    dist.destroy_process_group()


def measure(rate: str, mb: float, repeats: int) -> dict:
    """Shape this namespace's loopback at `rate` and time the all-reduce there."""
    link.shape(rate)
    program = ["-m", "benchmarks.linkcheck", "worker", "--mb", str(mb), "--repeats", str(repeats)]
    proc = subprocess.run(
        resolve(local_argv(TORCHRUN, program, 2)), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the all-reduce at {rate} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    bits = link.parse_rate(rate)
    floor = statistics.median(result["bytes_both_ranks"]) * 8 / bits if bits else None
    return {"rate": rate, "mb": mb, "floor_s": floor, **result}


def table(rows: list[dict], command: str) -> list[str]:
    lines = [
        SECTION,
        "",
        f"Produced by `{command}` on {datetime.now(UTC).date()} ({platform.platform()}, {platform.machine()}): 2 "
        "processes (torchrun, gloo), one float32 tensor all-reduced after one untimed all-reduce. Floor: the bytes "
        "both ranks wrote to their sockets per all-reduce, over the link rate: no all-reduce can be faster "
        "on a link of that rate.",
        "",
        "| link | tensor MB | bytes on the link per all-reduce | floor s | measured s (median) | min-max s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        floor = f"{r['floor_s']:.3f}" if r["floor_s"] is not None else "—"
        secs = r["seconds"]
        lines.append(
            f"| {r['rate']} | {r['mb']:g} | {statistics.median(r['bytes_both_ranks']):,.0f} | {floor} | "
            f"{statistics.median(secs):.3f} | {min(secs):.3f}-{max(secs):.3f} |"
        )
    return lines + [""]


def duplex_measure(rate: str, mb: float, repeats: int) -> dict:
    """Two per-node links (distbench/launching/netns.py) at `rate`: node 0 to node 1 alone, then both ways at once."""
    from distbench.launching.netns import NodeNetwork

    nbytes = int(mb * 1e6)
    link.shape(link.UNSHAPED)
    net = NodeNetwork(2, rate).up()
    try:
        alone = [transfers(net, [(0, 1)], nbytes)[0] for _ in range(repeats)]
        both = [max(transfers(net, [(0, 1), (1, 0)], nbytes)) for _ in range(repeats)]
    finally:
        net.down()
    return {"rate": rate, "mb": mb, "floor_s": nbytes * 8 / link.parse_rate(rate), "alone_s": alone, "both_s": both}


def duplex_table(row: dict, command: str) -> list[str]:
    alone, both = statistics.median(row["alone_s"]), statistics.median(row["both_s"])
    return [
        DUPLEX_SECTION,
        "",
        f"Produced by `{command}` on {datetime.now(UTC).date()} ({platform.platform()}, {platform.machine()}): two "
        f"simulated nodes on per-node links of {row['rate']} (`--link-mode per-node`), {row['mb']:g} MB over TCP "
        "from node 0 to node 1 alone, then one such transfer each way at the same time (the slower of the two). On "
        "a full-duplex link both take as long as one; through one shared queue (a hub, `--link-mode shared`) they "
        "would take twice as long.",
        "",
        "| link | MB each | floor s (MB / rate) | one way alone s (median, min-max) | both ways at once s "
        "| both / alone |",
        "|---|---|---|---|---|---|",
        f"| {row['rate']} | {row['mb']:g} | {row['floor_s']:.3f} | {alone:.3f} ({min(row['alone_s']):.3f}-"
        f"{max(row['alone_s']):.3f}) | {both:.3f} ({min(row['both_s']):.3f}-{max(row['both_s']):.3f}) | "
        f"{both / alone:.2f} |",
        "",
    ]


BRIDGE_SECTION = "## The bridge's capacity: every node sending at once"


def bridge_measure(nodes: int, mb: float, repeats: int) -> dict:
    """What the bridge carries with every one of `nodes` nodes sending `mb` MB to the next at once (bridge.py)."""
    link.shape(link.UNSHAPED)
    return {"nodes": nodes, "mb": mb, "aggregate_bits_per_s": ring_rates(nodes, mb, repeats)}


def bridge_table(rows: list[dict], command: str) -> list[str]:
    lines = [
        BRIDGE_SECTION,
        "",
        f"Produced by `{command}` on {datetime.now(UTC).date()} ({platform.platform()}, {platform.machine()}): N "
        "simulated nodes on unshaped per-node links (`--link-mode per-node`), each sending the same bytes over TCP "
        "to the next at the same time (a ring); the aggregate is all the bytes over the time the slowest transfer "
        "took. It is what the host's bridge and cores carry for all nodes together: an emulated cluster whose nodes' "
        "links, at their rate / the dilation, add up to more than this is limited by the host, not by its links.",
        "",
        "| nodes | MB each | aggregate Gbit/s (median, min-max) | per node Gbit/s |",
        "|---|---|---|---|",
    ]
    for r in rows:
        g = [x / 1e9 for x in r["aggregate_bits_per_s"]]
        med = statistics.median(g)
        lines.append(f"| {r['nodes']} | {r['mb']:g} | {med:.2f} ({min(g):.2f}-{max(g):.2f}) | {med / r['nodes']:.2f} |")
    return [*lines, ""]


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def check(
    rates: Annotated[str, typer.Option(help="Comma-separated link rates, none for unshaped.")] = "none,1gbit,100mbit",
    mb: Annotated[float, typer.Option(help="Size of the all-reduced tensor, MB.")] = 4.0,
    repeats: Annotated[int, typer.Option(help="Timed all-reduces per rate.")] = 5,
    out: Annotated[Path | None, typer.Option(help="Replace this file's section with the table.")] = None,
) -> None:
    rate_list = [r.strip() for r in rates.split(",") if r.strip()]
    for r in rate_list:
        link.parse_rate(r)
    link.enter_private_namespace()
    rows = [measure(r, mb, repeats) for r in rate_list]
    print(json.dumps(rows))
    if out is not None:
        from benchmarks.harness import replace_section

        section = table(rows, "python -m benchmarks.linkcheck " + " ".join(sys.argv[1:]))
        out.write_text(replace_section(out.read_text() if out.exists() else "# Network\n", SECTION, section) + "\n")
        print("\n".join(section))


@app.command()
def duplex(
    rate: Annotated[str, typer.Option(help="Each node's link rate.")] = "100mbit",
    mb: Annotated[float, typer.Option(help="Bytes of each transfer, MB (10^6).")] = 4.0,
    repeats: Annotated[int, typer.Option(help="Transfers of each kind.")] = 3,
    out: Annotated[Path | None, typer.Option(help="Replace this file's section with the table.")] = None,
) -> None:
    if link.parse_rate(rate) is None:
        raise SystemExit("error: --rate: give a rate (e.g. 100mbit): an unshaped link has no rate to check")
    link.enter_private_namespace()
    row = duplex_measure(rate, mb, repeats)
    print(json.dumps(row))
    if out is not None:
        from benchmarks.harness import replace_section

        section = duplex_table(row, "python -m benchmarks.linkcheck " + " ".join(sys.argv[1:]))
        out.write_text(
            replace_section(out.read_text() if out.exists() else "# commbench\n", DUPLEX_SECTION, section) + "\n"
        )
        print("\n".join(section))


@app.command()
def bridge(
    nodes: Annotated[str, typer.Option(help="Comma-separated node counts.")] = "2,4,8,16",
    mb: Annotated[float, typer.Option(help="Bytes each node sends, MB (10^6).")] = 20.0,
    repeats: Annotated[int, typer.Option(help="Rings of transfers per node count.")] = 3,
    out: Annotated[Path | None, typer.Option(help="Replace this file's section with the table.")] = None,
) -> None:
    link.enter_private_namespace()
    rows = [bridge_measure(int(n), mb, repeats) for n in nodes.split(",")]
    print(json.dumps(rows))
    if out is not None:
        from benchmarks.harness import write_section

        section = bridge_table(rows, "python -m benchmarks.linkcheck " + " ".join(sys.argv[1:]))
        write_section(out, BRIDGE_SECTION, section)
        print("\n".join(section))


@app.command("worker")
def worker_command(mb: float = 4.0, repeats: int = 5) -> None:
    worker(mb, repeats)


if __name__ == "__main__":
    app()
