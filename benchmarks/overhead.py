"""Adapter overhead and scaling: distbench against hand-written loops in each library's idiom (start-up has its own
benchmark, benchmarks/startup.py).

    python -m benchmarks.overhead [--pairs 3] [--steps 300] [--out docs/performance.md]
    python -m benchmarks.overhead --task bert-sentiment --data-dir DIR [--pairs 5] [--steps 40] [--world-sizes 2]
    python -m benchmarks.overhead --same-pinning [--backends ddp] [--world-sizes 2] [--pairs 5]

The BERT form writes (or replaces) the section "BERT sentiment: adapter overhead" of --out; the hand-written
BERT loops are plain fine-tuning loops (AdamW, per-batch padding, default library settings), and distbench
runs its default recipe, as a user would.

For ddp, accelerate and horovod at world sizes 1 and 2, the hand-written loop (benchmarks/handwritten/)
and `run.py` with the same configuration (MNIST ConvNet, global batch 64, the same threads per process,
the same steady-state steps after the same warm-up) run in pairs, the side that runs first alternating
(A B, B A, ...), and the median of the per-pair throughput ratios distbench / hand-written is reported. A
hand-written loop whose ranks end with different parameters (no gradient exchange) is refused. Scaling
compares DDP at world size 2 (1 thread per process) against twice `single` with 1 thread.

distbench pins each process's threads by default, the hand-written loops (as the libraries' examples) do not.
`--same-pinning` writes the section that separates the two: in each round the hand-written loop and distbench
`--no-pin-cores` (both unpinned), and the loop with `--pin` and distbench (both pinned as distbench pins).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, alternate, child_env, last_json, machine, run_checked, write_section
from distbench.launching.commands import command, usual_launcher
from distbench.launching.launch import local_argv, resolve
from distbench.machine import available_cpus

BERT_SECTION = "## BERT sentiment: adapter overhead"
# The hand-written loops gather a sample of every rank's parameters at the end (benchmarks/handwritten/common.py:
# rank_spread). Exchanged gradients leave them equal (0 measured under all three libraries); without the exchange
# they are 1e-2 apart after 8 MNIST steps.
RANK_SPREAD_MAX = 1e-6


def hand_written(backend: str, n: int, steps: int, threads: int, task: str = "mnist", extra: tuple = ()) -> float:
    module = f"benchmarks.handwritten.{backend}_loop"
    program = ["-m", module, "--task", task, "--steps", str(steps), "--threads", str(threads), *extra]
    cmd = resolve(local_argv(usual_launcher(backend), program, n))
    result = last_json(run_checked(cmd).stdout)
    if result["rank_spread"] > RANK_SPREAD_MAX:  # a loop whose ranks diverged exchanged no gradients
        raise RuntimeError(
            f"{' '.join(cmd)}: the ranks' parameters differ by {result['rank_spread']:.3g} at the end; "
            "a baseline that does not exchange gradients is no baseline"
        )
    return result["samples_per_sec"]


def distbench_run(backend: str, n: int, steps: int, threads: int, tmp: Path, task_args: tuple = ()) -> dict:
    out = tmp / f"{backend}-{n}-{time.monotonic_ns()}.json"
    # the warm-up is distbench's (timer.warmup_steps), the hand-written loops' default
    args = ["--max-steps", str(steps), "--threads", str(threads), "--no-progress", "--output", str(out), *task_args]
    run_checked(command(backend, n, args))
    return json.loads(out.read_text())


def ceiling(steps: int, tmp: Path) -> tuple[float, float]:
    """What two processes can do on this machine with no communication at all: two independent
    `single` runs (1 thread each) started together, their throughputs summed; and one alone."""
    outs = [tmp / f"ceiling-{i}-{time.monotonic_ns()}.json" for i in range(2)]
    args = lambda out: ["--max-steps", str(steps), "--threads", "1", "--no-progress", "--output", str(out)]  # noqa: E731
    procs = [
        subprocess.Popen(
            command("single", 1, args(o)),
            cwd=ROOT,
            env=child_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for o in outs
    ]
    for p in procs:
        p.wait()
    together = sum(json.loads(o.read_text())["samples_per_sec"] for o in outs)
    alone = distbench_run("single", 1, steps, 1, tmp)["samples_per_sec"]
    return together, alone


def ceiling_section(pairs: int, steps: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        runs = [ceiling(steps, Path(tmp)) for _ in range(pairs)]
    together = statistics.median(r[0] for r in runs)
    alone = statistics.median(r[1] for r in runs)
    return [
        CEILING_SECTION,
        "",
        f"Produced by `python -m benchmarks.overhead --ceiling-only` (pairs={pairs}, steps={steps}): two independent "
        "`single` runs with 1 thread each, started together (no communication at all), against one alone.",
        "",
        "| one process alone | two independent processes together | ratio to 2 x alone |",
        "|---|---|---|",
        f"| {alone:.0f} | {together:.0f} | **{together / (2 * alone):.3f}** |",
        "",
        "Per run: " + ", ".join(f"{t:.0f} vs 2 x {a:.0f}" for t, a in runs),
        "",
    ]


def overhead_rows(
    task: str, backends: list[str], world_sizes: list[int], pairs: int, steps: int, tmp: Path, data_dir: Path | None
) -> list[tuple]:
    """(backend, world, threads, hand-written median, distbench median, median ratio, per-pair ratios); within a
    pair the hand-written loop runs first in odd pairs, distbench in even ones."""
    hand_extra = ("--data-dir", str(data_dir)) if data_dir else ()
    task_args = ("--task", task, *hand_extra)
    rows = []
    for backend in backends:
        for n in world_sizes:
            threads = max(1, available_cpus() // n)
            ratios, hand, ours = [], [], []
            for i in range(pairs):
                a, rec = alternate(
                    i,
                    partial(hand_written, backend, n, steps, threads, task, hand_extra),
                    partial(distbench_run, backend, n, steps, threads, tmp, task_args),
                )
                b = rec["samples_per_sec"]
                hand.append(a)
                ours.append(b)
                ratios.append(b / a)
                print(
                    f"{task} {backend} x{n}: pair {len(ratios)}: hand-written {a:.1f}, distbench {b:.1f} samples/s "
                    f"({b / a:.3f})",
                    file=sys.stderr,
                    flush=True,
                )
            rows.append(
                (
                    backend,
                    n,
                    threads,
                    statistics.median(hand),
                    statistics.median(ours),
                    statistics.median(ratios),
                    ratios,
                )
            )
    return rows


def table(rows: list[tuple]) -> list[str]:
    lines = [
        "| backend | world | threads/proc | hand-written samples/s | distbench samples/s | ratio (median) | ratios |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend, n, t, h, o, r, rs in rows:
        per_pair = " ".join(f"{x:.3f}" for x in rs)
        lines.append(f"| {backend} | {n} | {t} | {h:.1f} | {o:.1f} | **{r:.3f}** | {per_pair} |")
    return lines


def bert_section(rows: list[tuple], pairs: int, steps: int, command_line: str) -> list[str]:
    return [
        BERT_SECTION,
        "",
        f"Produced by `{command_line}` (pairs={pairs}, steps={steps}, 5 of them warm-up) on {machine()}. The bundled "
        "MiniLM-L6 BERT on MR polarity, global batch 32. The hand-written loops "
        "(`benchmarks/handwritten/*_loop.py --task bert-sentiment`) "
        "are plain fine-tuning loops in each library's idiom: AdamW over all parameters, per-batch padding, "
        "DistributedSampler (DDP, Horovod) or Accelerate's `prepare`, default library settings, no clipping, no "
        "schedule. distbench runs its default BERT recipe (docs/bert.md). The side that runs first alternates by "
        "pair (A B, B A, ...); the ratio is distbench / hand-written per pair. Each loop's ranks end with the same "
        "parameters (checked: `rank_spread`).",
        "",
        *table(rows),
        "",
    ]


MNIST_SECTION = "## Adapter overhead: distbench / hand-written loop (median of A/B pairs)"
SCALING_SECTION = "## Scaling: world size 2, 1 thread per process, against twice `single` with 1 thread"
CEILING_SECTION = "## Hardware ceiling for two processes"
PINNING_SECTION = "## Adapter overhead at the same pinning (MNIST)"


def mnist_section(rows: list[tuple], pairs: int, steps: int) -> list[str]:
    return [
        MNIST_SECTION,
        "",
        f"Produced by `python -m benchmarks.overhead --pairs {pairs} --steps {steps}` on {machine()}. MNIST "
        "ConvNet, global batch 64, bundled 4,500 training digits. The hand-written loops (`benchmarks/handwritten/`) "
        "follow each library's own examples: DataLoader over an in-memory TensorDataset with DistributedSampler "
        "(DDP, Horovod) or Accelerate's `prepare`. Both sides: same global batch, threads per process "
        "(cores / processes), warm-up and steady-state steps. The side that runs first alternates by pair (A B, "
        "B A, ...); the ratio is distbench / hand-written per pair. Each loop's ranks end with the same parameters "
        "(checked: `rank_spread`).",
        "",
        *table(rows),
        "",
    ]


def scaling_pairs(backend_list: list[str], pairs: int, steps: int, tmp: Path) -> dict:
    """Per round: single x1 (1 thread), then each backend x2 (1 thread per process); efficiency against
    twice that round's single."""
    scaling: dict[str, list[float]] = {"single_sps": []}
    for _ in range(pairs):
        rec = distbench_run("single", 1, steps, 1, tmp)
        base = rec["samples_per_sec"]
        for backend in backend_list:
            sps = distbench_run(backend, 2, steps, 1, tmp)["samples_per_sec"]
            scaling.setdefault(backend, []).append(sps / (2 * base))
        scaling["single_sps"].append(base)
    return scaling


def scaling_section(scaling: dict, backend_list: list[str]) -> list[str]:
    base = statistics.median(scaling["single_sps"])
    lines = [
        SCALING_SECTION,
        "",
        f"`single` x1 t1: {base:.0f} samples/s (median).",
        "",
        "| backend | efficiency (median) | per pair | vs DDP |",
        "|---|---|---|---|",
    ]
    ddp_eff = statistics.median(scaling["ddp"]) if "ddp" in scaling else None
    for backend in backend_list:
        eff = statistics.median(scaling[backend])
        vs = f"{eff / ddp_eff:.3f}" if ddp_eff else "—"
        lines.append(f"| {backend} | **{eff:.3f}** | {' '.join(f'{x:.3f}' for x in scaling[backend])} | {vs} |")
    return lines + [""]


def pinning_rows(backend: str, n: int, pairs: int, steps: int, tmp: Path) -> list[dict]:
    """Rounds of four runs: the hand-written loop and distbench both unpinned, then both pinned, each pair in
    `alternate`'s order (the loop first in odd rounds); samples/s keyed (side, pinned)."""
    threads = max(1, available_cpus() // n)
    rounds = []
    for i in range(pairs):
        measured = {}
        for pinned in (False, True):
            hand = partial(hand_written, backend, n, steps, threads, extra=("--pin",) if pinned else ())
            ours = partial(distbench_run, backend, n, steps, threads, tmp, () if pinned else ("--no-pin-cores",))
            measured["hand", pinned], rec = alternate(i, hand, ours)
            measured["distbench", pinned] = rec["samples_per_sec"]
        print(
            f"{backend} x{n} round {i + 1}: "
            + ", ".join(f"{s}{' pinned' if p else ''} {v:.0f}" for (s, p), v in measured.items()),
            file=sys.stderr,
            flush=True,
        )
        rounds.append(measured)
    return rounds


def pinning_section(results: dict[tuple[str, int], list[dict]], pairs: int, steps: int, command_line: str) -> list:
    med = statistics.median
    lines = [
        PINNING_SECTION,
        "",
        f"Produced by `{command_line}` on {machine()}: MNIST, {steps} steps, {pairs} rounds; each round runs "
        "the hand-written loop and distbench both unpinned (the loop as the examples run, distbench "
        "`--no-pin-cores`) and both pinned (the loop with `--pin`: every thread on the local rank's cores as "
        "distbench pins by default), the loop first in odd rounds. Ratios are distbench / hand-written within "
        "a round.",
        "",
        "| backend | world | pinning | hand-written samples/s | distbench samples/s | ratio (median) | ratios |",
        "|---|---|---|---|---|---|---|",
    ]
    for (backend, n), rounds in results.items():
        for pinned in (False, True):
            hand, ours = [r["hand", pinned] for r in rounds], [r["distbench", pinned] for r in rounds]
            ratios = [b / a for a, b in zip(hand, ours, strict=True)]
            per_round = " ".join(f"{x:.3f}" for x in ratios)
            lines.append(
                f"| {backend} | {n} | {'both pinned' if pinned else 'neither'} | {med(hand):.0f} | "
                f"{med(ours):.0f} | **{med(ratios):.3f}** | {per_round} |"
            )
    return lines + [""]


def main(
    pairs: Annotated[int, typer.Option(help="A/B pairs per configuration.")] = 3,
    steps: Annotated[int, typer.Option(help="Training steps per run (5 of them warm-up).")] = 300,
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "performance.md",
    backends: Annotated[str, typer.Option()] = "ddp,accelerate,horovod",
    world_sizes: Annotated[str, typer.Option()] = "1,2",
    task: Annotated[str, typer.Option(help="mnist (the whole document) or bert-sentiment (its section).")] = "mnist",
    data_dir: Annotated[Path | None, typer.Option(help="bert-sentiment: the rt-polarity folder.")] = None,
    ceiling_only: Annotated[
        bool, typer.Option(help="Only measure the two-process ceiling; replace its section of --out.")
    ] = False,
    same_pinning: Annotated[
        bool, typer.Option(help="Only the hand-written loop and distbench at the same pinning (MNIST); its section.")
    ] = False,
) -> None:
    if same_pinning:
        with tempfile.TemporaryDirectory() as tmp:
            results = {
                (b, n): pinning_rows(b, n, pairs, steps, Path(tmp))
                for b in backends.split(",")
                for n in (int(w) for w in world_sizes.split(","))
                if n > 1
            }
        section = pinning_section(results, pairs, steps, "python -m benchmarks.overhead " + " ".join(sys.argv[1:]))
        write_section(out, PINNING_SECTION, section)
        print("\n".join(section))
        return
    if ceiling_only:
        section = ceiling_section(pairs, steps)
        write_section(out, CEILING_SECTION, section)
        print("\n".join(section))
        return
    backend_list, sizes = backends.split(","), [int(w) for w in world_sizes.split(",")]
    if task == "bert-sentiment":
        with tempfile.TemporaryDirectory() as tmp:
            rows = overhead_rows(task, backend_list, sizes, pairs, steps, Path(tmp), data_dir)
        command_line = "python -m benchmarks.overhead " + " ".join(sys.argv[1:])
        section = bert_section(rows, pairs, steps, command_line)
        write_section(out, BERT_SECTION, section)
        print("\n".join(section))
        return
    with tempfile.TemporaryDirectory() as tmp:
        rows = overhead_rows(task, backend_list, sizes, pairs, steps, Path(tmp), None)
        scaling = scaling_pairs(backend_list, pairs, steps, Path(tmp))
    sections = {
        MNIST_SECTION: mnist_section(rows, pairs, steps),
        SCALING_SECTION: scaling_section(scaling, backend_list),
        CEILING_SECTION: ceiling_section(pairs, steps),
    }
    for header, section in sections.items():  # only these sections: the BERT, start-up and others stay
        write_section(out, header, section)
    print("\n\n".join("\n".join(s) for s in sections.values()))


if __name__ == "__main__":
    typer.run(main)
