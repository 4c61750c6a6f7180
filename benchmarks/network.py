"""docs/network.md's tables, from `compare --nodes 2 --link-rate ...` sweeps: how much of the link each library hides.

    python -m benchmarks.network docs/results/network-mnist docs/results/network-bert [--out docs/network.md]

For each distributed configuration of each sweep: samples/s (median, 95 % CI), the step and its phases as the
loop times them (forward+backward holds the all-reduces a library overlaps with backward; the optimizer phase
holds the ones it waits for there: Horovod's synchronize), the bytes both ranks write to their sockets per step
(the record's written_bytes_per_step x world size: every one of them crosses the shaped loopback) and the time
the link needs for them at its rate. Against an estimate of the step's computation alone (the `single` x1
reference's step at the same per-process batch), the exposed communication is the step beyond it, and the
overlap is the share of the hideable time that was hidden: (computation + link time - step) / the shorter of
the two. 1: the step takes only as long as the longer of computation and transfer; 0: the transfer is added on
after the computation. It is an estimate: the reference computes twice the batch on one core (per sample the
same work), and no communication on a CPU is free of CPU time. Only this file's own sections are replaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, library_verdicts, write_task_sections
from distbench.backends import REFERENCE
from distbench.launching import link
from distbench.sweep.grouping import Config


def _reference_step_ms(configs: list[Config], task: str) -> tuple[float, int] | None:
    """(step p50 ms, global batch) of the task's single x1 reference."""
    ref = next((c for c in configs if c.task == task and c.backend == REFERENCE and c.ok), None)
    if ref is None:
        return None
    return ref.median("step_time_ms.p50"), ref.ok[0]["global_batch_size"]


def link_rows(configs: list[Config]) -> list[dict]:
    rows = []
    for c in (c for c in configs if c.backend != REFERENCE and c.ok):
        ref = _reference_step_ms(configs, c.task)
        step = c.median("step_time_ms.p50")
        on_link = c.median("written_bytes_per_step") * c.world_size
        bits = link.parse_rate(c.link_rate)
        link_ms = on_link * 8 / bits * 1e3 if bits else None
        compute = ref[0] * c.ok[0]["per_rank_batch_size"] / ref[1] if ref else None
        exposed = step - compute if compute is not None else None
        overlap = (compute + link_ms - step) / min(compute, link_ms) if link_ms and compute else None
        phases = {p: c.median(f"step_breakdown_ms.{p}_ms") for p in ("forward_backward", "optimizer")}
        rows.append(
            {
                "config": c,
                "sps": c.summary(),
                "step": step,
                "fb": phases["forward_backward"],
                "opt": phases["optimizer"],
                "mb": on_link / 1e6,
                "link_ms": link_ms,
                "compute": compute,
                "exposed": exposed,
                "overlap": overlap,
            }
        )
    return rows


def _f(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def task_section(task: str, configs: list[Config], sweep: dict) -> list[str]:
    mine = [c for c in configs if c.task == task]
    rows = link_rows(mine)
    ref = _reference_step_ms(mine, task)
    lines = [
        f"## {task}: 2 simulated nodes x 1 process",
        "",
        f"Sweep: `{sweep['command']}` ({sweep['started_at']}; {sweep['repeats']} rounds, order seed "
        f"{sweep['order_seed']}). Reference for the computation: `single` x1, step p50 "
        f"{_f(ref[0] if ref else None, '.1f')} ms at batch {ref[1] if ref else '—'}.",
        "",
        "| backend | link | samples/s median (95 % CI) | step p50 ms | forward+backward ms | optimizer ms | "
        "MB on the link per step | link time ms | computation ms (est.) | exposed communication ms | "
        "overlap |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        rows,
        key=lambda r: (
            r["config"].link_rate != "none",
            -(link.parse_rate(r["config"].link_rate) or 0),
            r["config"].backend,
        ),
    ):
        c, s = r["config"], r["sps"]
        interval = f" ({s.interval('.1f')})" if s.has_interval else f" (min-max {s.min:.1f}-{s.max:.1f})"
        lines.append(
            f"| {c.backend} | {'unshaped' if c.link_rate == 'none' else c.link_rate} | {s.median:.1f}{interval} | "
            f"{r['step']:.1f} | {_f(r['fb'], '.1f')} | {_f(r['opt'], '.1f')} | {r['mb']:.2f} | "
            f"{_f(r['link_ms'], '.1f')} | {_f(r['compute'], '.1f')} | {_f(r['exposed'], '.1f')} | "
            f"{_f(r['overlap'], '.2f')} |"
        )
    lines += ["", "Verdicts (paired within rounds, same link):", ""]
    lines += library_verdicts(mine)
    return lines + [""]


def main(
    dirs: Annotated[list[Path], typer.Argument(help="Folders written by `run.py compare --nodes 2 --link-rate`.")],
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "network.md",
) -> None:
    write_task_sections(dirs, out, "Network", task_section)


if __name__ == "__main__":
    typer.run(main)
