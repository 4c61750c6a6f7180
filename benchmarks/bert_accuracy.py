"""BERT sentiment accuracy: one epoch on MR polarity at global batch 32, over several seeds.

    python -m benchmarks.bert_accuracy [--data-dir ../shared/data/rt-polarity] [--seeds 0,1,2]
        [--backend ddp --nprocs 2] [--recipe "--lr 5e-5"] [--out docs/bert-accuracy.md]

The default is run.py's own defaults, no extra options (the recipe measured best: docs/bert.md). Each seed is
one full run
of `run.py --task bert-sentiment` with the default model (the bundled MiniLM-L6 unless the recipe says
--model), started by the backend's own launcher. The table gives each run's test accuracy (of 1,066
sentences), its throughput and step time, and the median over seeds, together with the exact command;
one seed changes the classifier's initial weights and the data order.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env
from distbench.launching.commands import command

RECIPE = ""  # run.py's defaults: the recipe measured best (docs/bert.md)


def _recipe_of(config: dict) -> str:
    keys = ("lr", "head_lr", "dropout", "schedule", "warmup_ratio", "max_grad_norm", "max_length", "batch_size")
    return ", ".join(f"{k} {config[k]}" for k in keys)


def main(
    data_dir: Annotated[
        Path | None, typer.Option(help="Folder with rt-polarity.pos/.neg (default: the cache or a download).")
    ] = None,
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds.")] = "0,1,2",
    backend: Annotated[str, typer.Option()] = "ddp",
    nprocs: Annotated[int, typer.Option()] = 2,
    recipe: Annotated[str, typer.Option(help="run.py options of the recipe under test.")] = RECIPE,
    target: Annotated[float, typer.Option(help="Accuracy the median is held against.")] = 0.84,
    out: Annotated[Path, typer.Option()] = ROOT / "docs" / "bert-accuracy.md",
) -> None:
    env = child_env()
    base = ["--task", "bert-sentiment", *(["--data-dir", str(data_dir.resolve())] if data_dir else []), *recipe.split()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(s) for s in seeds.split(",")]:
            rec_path = Path(tmp) / f"seed{seed}.json"
            cmd = command(backend, nprocs, [*base, "--seed", str(seed), "--no-progress", "--output", str(rec_path)])
            print(f"[seed {seed}] {' '.join(cmd)}", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"seed {seed} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            rows.append((seed, json.loads(rec_path.read_text())))
    accs = [r["eval_accuracy"] for _, r in rows]
    median = statistics.median(accs)
    first = rows[0][1]
    shown = " ".join(
        ["python -m benchmarks.bert_accuracy", *(["--data-dir", str(data_dir)] if data_dir else []), "--seeds", seeds]
        + (["--backend", backend, "--nprocs", str(nprocs)] if (backend, nprocs) != ("ddp", 2) else [])
        + ([f'--recipe "{recipe}"'] if recipe != RECIPE else [])
    )
    lines = [
        "# BERT sentiment: accuracy over seeds",
        "",
        f"Produced by `{shown}` on {datetime.now(UTC).date()} ({os.cpu_count()} cores, CPU, "
        f"{first['environment']['threads_per_process']} thread(s) per process). One epoch "
        f"({first['steps']} global steps of {first['global_batch_size']}) under {backend} with {first['world_size']} "
        f"processes; model: {first['dataset'].get('model')}; run.py options: `{recipe or 'none'}` "
        f"(defaults otherwise; the resolved recipe: {_recipe_of(first['config'])}).",
        "",
        "| seed | test accuracy | correct / count | samples/s | step p50 / p90 ms | peak RSS MB |",
        "|---|---|---|---|---|---|",
    ]
    for seed, r in rows:
        st = r["step_time_ms"]
        correct = round(r["eval_accuracy"] * r["eval_count"])
        lines.append(
            f"| {seed} | {r['eval_accuracy']:.4f} | {correct} / {r['eval_count']} | "
            f"{r['samples_per_sec']:.1f} | {st['p50']:.0f} / {st['p90']:.0f} | "
            f"{r['peak_rss_mb']:.0f} |"
        )
    verdict = "meets" if median >= target else "does not meet"
    lines += [
        "",
        f"**Median over {len(rows)} seeds: {median:.4f}** ({verdict} the {target} target; "
        f"range {min(accs):.4f}-{max(accs):.4f}). Median samples/s: "
        f"{statistics.median(r['samples_per_sec'] for _, r in rows):.1f}.",
        "",
    ]
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
