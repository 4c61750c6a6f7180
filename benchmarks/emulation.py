"""The emulator checked (`--emulate`, `--dilation`; docs/emulation.md): against real runs, across dilations, and at
the most nodes this machine holds.

    python -m benchmarks.emulation real [--pairs 3]        # emulated against real, 2 nodes x 1 on per-node links
    python -m benchmarks.emulation dilation [--pairs 3]    # 4 emulated nodes at dilation 1 against 4
    python -m benchmarks.emulation largest                 # 8 and 16 emulated nodes: do they run, in what memory

Every run is `run.py simulate` (one job, its record), MNIST at micro-batch 32 (global 32 x nodes), one thread per
process, the profile docs/profiles/mnist-b32-cpu.json (this machine's CPU at one thread: an emulated rank waits as
long as a real one computes). Pairs alternate which goes first; ratios are paired, their median and range given.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env, machine, write_section

PROFILE = "docs/profiles/mnist-b32-cpu.json"
DOC = ROOT / "docs" / "emulation.md"
SECTIONS = {
    "real": "## Validated: emulated against real runs at 2 nodes",
    "dilation": "## Validated: the same emulated cluster at two dilations",
    "largest": "## The largest emulated cluster this machine holds",
}
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def simulate(out: Path, backend: str, nodes: int, rate: str, steps: int, *extra: str) -> dict:
    """One job of `nodes` x 1 on per-node links at `rate` (shared loopback where rate is "none"): its record."""
    placed = ["--nodes", str(nodes), "--nprocs", "1"]
    if rate != "none":
        placed += ["--link-mode", "per-node", "--link-rate", rate]
    train = ["--batch-size", str(32 * nodes), "--threads", "1", "--dropout", "0", "--max-steps", str(steps)]
    cmd = [sys.executable, "run.py", "simulate", "--backend", backend, *placed, "--", *train, *extra]
    proc = subprocess.run(
        [*cmd, "--no-progress", "--force", "--output", str(out)], cwd=ROOT, env=child_env(), capture_output=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.read_text())


def ratio_line(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"


@app.command()
def real(
    pairs: Annotated[int, typer.Option(help="Real and emulated pairs per case.")] = 3,
    steps: Annotated[int, typer.Option(help="Steps per run.")] = 60,
    backends: Annotated[str, typer.Option()] = "ddp,horovod,fsdp",
    rates: Annotated[str, typer.Option()] = "100mbit,1gbit",
) -> None:
    """Emulated against real: where a real node's core computes and its library's communication waits its turn on
    the same core, the emulated node's core is free; the ratio says how much that matters, case by case."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends.split(","):
            for rate in rates.split(","):
                got: dict[str, list[float]] = {"real": [], "emulated": []}
                for i in range(pairs):
                    order = ("real", "emulated") if i % 2 == 0 else ("emulated", "real")
                    for kind in order:
                        extra = ["--emulate", PROFILE] if kind == "emulated" else []
                        rec = simulate(Path(tmp) / f"{kind}.json", backend, 2, rate, steps, *extra)
                        got[kind].append(rec["samples_per_sec"])
                ratios = [e / r for e, r in zip(got["emulated"], got["real"], strict=True)]
                rows.append(
                    f"| {backend} | {rate} | {statistics.median(got['real']):.0f} | "
                    f"{statistics.median(got['emulated']):.0f} | {ratio_line(ratios)} |"
                )
                print(rows[-1], file=sys.stderr, flush=True)
    header = ["| library | link | real samples/s | emulated samples/s | emulated / real (paired: median, range) |"]
    _write(
        "real",
        f"python -m benchmarks.emulation real --pairs {pairs} --steps {steps} --backends {backends} --rates {rates}",
        f"2 simulated nodes x 1 process on per-node links, MNIST, global batch 64, {steps} steps, {pairs} pairs",
        [*header, "|---|---|---|---|---|", *rows],
    )


@app.command()
def dilation(
    pairs: Annotated[int, typer.Option(help="Pairs of the two dilations.")] = 3,
    steps: Annotated[int, typer.Option(help="Steps per run.")] = 40,
    nodes: Annotated[int, typer.Option()] = 4,
    rate: Annotated[str, typer.Option(help="The emulated link (shaped at rate / K).")] = "1gbit",
    k: Annotated[float, typer.Option(help="The dilation set against 1.")] = 4.0,
    backends: Annotated[str, typer.Option()] = "ddp,fsdp",
) -> None:
    """The same emulated cluster at dilation 1 and K: samples/s (divided back) paired."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends.split(","):
            got: dict[float, list[float]] = {1.0: [], k: []}
            busy: dict[float, list[float]] = {1.0: [], k: []}
            for i in range(pairs):
                for kk in (1.0, k) if i % 2 == 0 else (k, 1.0):
                    args = ["--emulate", PROFILE, "--dilation", str(kk)]
                    rec = simulate(Path(tmp) / f"k{kk}.json", backend, nodes, rate, steps, *args)
                    assert rec["link_rate"] == rate, rec["link_rate"]
                    got[kk].append(rec["samples_per_sec"])
                    busy[kk].append(rec["emulated"]["host_busy_share"])
            ratios = [b / a for a, b in zip(got[1.0], got[k], strict=True)]
            shares = " / ".join(f"{100 * statistics.median(busy[kk]):.0f} %" for kk in (1.0, k))
            rows.append(
                f"| {backend} | {statistics.median(got[1.0]):.0f} | {statistics.median(got[k]):.0f} | "
                f"{ratio_line(ratios)} | {shares} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    _write(
        f"dilation at {rate}",
        f"python -m benchmarks.emulation dilation --pairs {pairs} --steps {steps} --nodes {nodes} --rate {rate} "
        f"--k {k:g} --backends {backends}",
        f"{nodes} emulated nodes x 1 process on per-node links of {rate} (shaped at {rate} / K), MNIST, global batch "
        f"{32 * nodes}, {steps} steps, {pairs} pairs; samples/s divided back by K",
        [
            f"| library | samples/s at K = 1 | at K = {k:g} | K = {k:g} / K = 1 (paired: median, range) | the "
            f"processes' share of their cores, K = 1 / K = {k:g} (median) |",
            "|---|---|---|---|---|",
            *rows,
        ],
    )


@app.command()
def largest(
    sizes: Annotated[str, typer.Option(help="Node counts to try.")] = "8,16",
    backend: Annotated[str, typer.Option()] = "ddp",
    steps: Annotated[int, typer.Option()] = 20,
    dilation: Annotated[float, typer.Option(help="Each size at dilation 1 and at this one.")] = 4.0,
    rate: Annotated[str, typer.Option(help="Per-node links of this rate (none: unshaped loopback).")] = "none",
) -> None:
    """Emulated clusters of each size, unshaped: whether they run, their samples/s, the host's share and each
    process's memory, at dilation 1 and K."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, sizes.split(",")):
            for k in (1.0, dilation):
                args = ["--emulate", PROFILE, "--dilation", str(k)]
                rec = simulate(Path(tmp) / f"n{n}.json", backend, n, rate, steps, *args)
                share = rec["emulated"]["host_busy_share"]
                rows.append(
                    f"| {n} | {k:g} | {rec['samples_per_sec']:.0f} | {rec['step_time_ms']['p50']:.1f} | "
                    f"{100 * share:.0f} %{' (host-bound)' if rec['emulated']['host_bound'] else ''} | "
                    f"{rec['peak_rss_mb']:.0f} | {n * rec['peak_rss_mb'] / 1024:.1f} | {rec['startup_s']:.0f} |"
                )
                print(rows[-1], file=sys.stderr, flush=True)
    _write(
        "largest" + ("" if rate == "none" else f" at {rate}"),
        f"python -m benchmarks.emulation largest --sizes {sizes} --backend {backend} --steps {steps} "
        f"--dilation {dilation:g} --rate {rate}",
        f"{backend}, N emulated nodes x 1 process, "
        + ("unshaped loopback" if rate == "none" else f"per-node links of {rate}")
        + f", MNIST, global batch 32 x N, {steps} steps; "
        "samples/s and step time divided back by the dilation K",
        [
            "| nodes | K | samples/s | step p50 ms | the processes' share of their cores | peak RSS per process MB | "
            "all processes GB (at most) | start-up of the main process s |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
        ],
    )


def _write(name: str, command: str, what: str, table: list[str]) -> None:
    kind, _, rate = name.partition(" at ")
    title = SECTIONS[kind] + (f" ({rate} links)" if rate else "")
    lines = [title, "", f"Produced by `{command}` on {machine()}: {what}.", "", *table, ""]
    write_section(DOC, title, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    app()
