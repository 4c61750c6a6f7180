"""docs/fsdp.md's and docs/deepspeed.md's tables, from `compare` sweeps of the sharding libraries against ddp at world
sizes 1 and 2 (Makefile: bench-fsdp, bench-deepspeed).

    python -m benchmarks.fsdp docs/results/fsdp/mnist docs/results/fsdp/synthetic-resnet docs/results/fsdp/bert \
        [--out docs/fsdp.md]

For each configuration: the state each rank holds (parameters, gradients, optimizer: the record's exact
memory_per_rank, the largest rank's) and its ratio to the same configuration's x1, the peak RSS, the bytes each rank
sent per step (written_bytes_per_step, median), and samples/s with its interval and the speed-up over the same
rounds' `single` x1; then the verdicts between backends at the same world size. The sharding backends' speeds
stand beside the gloo caveat, as everywhere they are shown. Only the document's own sections are replaced (one per
task); its plots are those of the folders given (docs/results/NAME/TASK).
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, library_verdicts, write_task_sections
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.grouping import Config
from distbench.sweep.markdown import gloo_caveat, mb, with_interval
from distbench.sweep.verdicts import config_row
from distbench.training.memory import KINDS, state_bytes


def rows(configs: list[Config]) -> list[dict]:
    ok = [c for c in configs if c.ok]
    out = [config_row(c, configs) for c in ok]
    at_one = {_at_one(c): state_bytes(r) for c, r in zip(ok, out, strict=True) if c.world_size == 1}
    for c, r in zip(ok, out, strict=True):
        one = at_one.get(_at_one(c))
        r["state_bytes"] = state_bytes(r)
        r["of_x1"] = r["state_bytes"] / one if one and r["state_bytes"] is not None else None
        sent = [x["written_bytes_per_step"] for x in c.ok if x.get("written_bytes_per_step") is not None]
        r["sent_bytes"] = statistics.median(sent) if sent else None
    return out


def _at_one(c: Config) -> SweepConfig:
    """The same configuration (backend, ZeRO stage, ...) at world size 1, on one node, whatever its threads (x1 runs
    take every core, x2 runs their share)."""
    return replace(c.config, world_size=1, nodes=1, threads=0)


def task_section(task: str, configs: list[Config], sweep: dict, results: str = "fsdp") -> list[str]:
    """One task's section: its table, the gloo caveat, the verdicts and the memory plot (in docs/results/`results`)."""
    mine = [c for c in configs if c.task == task]
    ok = next(c for c in mine if c.ok).ok[0]
    lines = [
        f"## {task}",
        "",
        f"Sweep: `{sweep['command']}` ({sweep['started_at']}; {sweep['repeats']} rounds, order seed "
        f"{sweep['order_seed']}); global batch {ok['global_batch_size']}, {ok['steps']} steps.",
        "",
        "| configuration | parameters MB | gradients MB | optimizer MB | state MB | state / x1 | peak RSS MB | "
        "sent per step MB | samples/s median (95 % CI) | speed-up over single x1 (CI) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows(mine):
        of_x1 = "—" if r["of_x1"] is None else f"{r['of_x1']:.3f}"
        lines.append(
            f"| {r['label']} | {' | '.join(mb(r.get(k), '.3f') for k in KINDS)} | {mb(r['state_bytes'], '.3f')} | "
            f"{of_x1} | {r['peak_rss_mb']:.0f} | {mb(r['sent_bytes'], '.3f')} | "
            f"{with_interval(r, 'samples_per_sec', '.1f')} | {with_interval(r, 'speedup', '.2f')} |"
        )
    lines += ["", *gloo_caveat(mine), "Verdicts (paired within rounds):", ""]
    lines += library_verdicts(mine)
    return lines + ["", f"![memory per rank](results/{results}/{_folder(task)}/{task}-memory.png)", ""]


def _folder(task: str) -> str:
    return {"bert-sentiment": "bert"}.get(task, task)


def main(
    dirs: Annotated[list[Path], typer.Argument(help="Folders written by `run.py compare` (the Makefile names them).")],
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "fsdp.md",
) -> None:
    results = dirs[0].resolve().parent.name  # docs/results/<results>/<task>: where the plots are
    write_task_sections(dirs, out, out.stem, functools.partial(task_section, results=results))


if __name__ == "__main__":
    typer.run(main)
