"""Is the shaped link real? A gloo all-reduce of S bytes between 2 processes, timed on each link rate.

    python -m benchmarks.linkcheck [--rates none,1gbit,100mbit] [--mb 4] [--repeats 5] [--out docs/network.md]

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
from distbench.launching.launch import TORCHRUN, local_argv, resolve
from distbench.training.timer import written_bytes

SECTION = "## Is the shaping real? A gloo all-reduce on each link"


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


@app.command("worker")
def worker_command(mb: float = 4.0, repeats: int = 5) -> None:
    worker(mb, repeats)


if __name__ == "__main__":
    app()
