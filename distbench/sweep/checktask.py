"""`run.py check-task TASK`: does a task keep the fairness contract under every backend?

First in this process: the task loads and has the interface, and two builds of its model under the same seed
are identical. Then `single` x1 and each available distributed backend x2, with dropout off (`--dropout 0`,
which reaches the task as cfg.dropout: a task with randomness of its own must turn it off there), each with its
real launcher (a small sweep through the local executor). Per backend: the largest per-step loss difference to
single x1, the checksum difference, the evaluation count against the test set, the ranks' dataset fingerprints,
and a verdict that names the part of the contract a failure breaks (distbench/training/fairness.py). Exit 0 when
every backend passes, 1 when one fails, 2 on bad input.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path

from distbench.backends import REFERENCE, get_spec
from distbench.config import RunConfig
from distbench.errors import BackendUnavailable, UserError
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.executor import LocalExecutor
from distbench.training import fairness


def _static_checks(task_spec: str, seed: int) -> bool:
    """The interface and the seed, in this process: one line each on failure (False for the seed)."""
    from distbench.tasks import build_task

    task = build_task(RunConfig(task=task_spec, dropout=0.0, seed=seed))
    if not fairness.weights_follow_the_seed(task, seed):
        print(
            f"check-task: {task_spec} FAILS the contract: weights do not follow the seed (two builds of the model "
            f"with seed {seed} differ): build_model must draw only from torch's global RNG, which the loop seeds",
            file=sys.stderr,
        )
        return False
    return True


def _available(backends: list[str]) -> list[str]:
    out = []
    for b in backends:
        try:
            get_spec(b).load()
            out.append(b)
        except BackendUnavailable as e:
            print(f"check-task: {b} skipped: {e}", file=sys.stderr)
    return out


def _run(backend: str, n: int, args: list[str], tmp: Path, timeout_s: int) -> dict:
    out = tmp / f"{backend}-x{n}.json"
    config = SweepConfig(task=args[args.index("--task") + 1], backend=backend, world_size=n, threads=1)
    print(f"check-task: running {backend} x{n}", file=sys.stderr, flush=True)
    rec = LocalExecutor().run(config, [*args, "--output", str(out), "--force"], out, tmp / f"{backend}.log", timeout_s)
    if rec["status"] != "ok":
        last = (rec.get("error") or "").strip().splitlines()
        print("\n".join(f"  | {line}" for line in last), file=sys.stderr)  # the run's own last lines
        raise UserError(f"check-task: {backend} x{n} did not finish: {last[-1] if last else 'no output'}")
    return rec


def _line(f: fairness.Finding) -> str:
    diff = "—" if f.max_loss_diff is None else f"{f.max_loss_diff:.2e}"
    rel = "—" if f.checksum_rel_diff is None else f"{f.checksum_rel_diff:.1e}"
    verdict = "ok" if f.ok else "FAILS: " + "; ".join(f.problems)
    return f"| {f.backend} | {diff} | {rel} | {f.eval_count} | {verdict} |"


def check_task(
    task: str, steps: int, backends: str, seed: int, extra: str, run_timeout_s: int, keep: Path | None
) -> int:
    """Run the checks; the exit code (0: the contract holds under every backend, 1: it does not)."""
    if steps <= 0:
        raise UserError(f"--steps must be positive, got {steps}")
    distributed = [b.strip() for b in backends.split(",") if b.strip() and b.strip() != REFERENCE]
    for b in distributed:
        get_spec(b)
    if not _static_checks(task, seed):
        return 1
    args = [
        "--task",
        task,
        "--seed",
        str(seed),
        "--dropout",
        "0",
        "--max-steps",
        str(steps),
        "--threads",
        "1",
        "--no-progress",
        *shlex.split(extra),
    ]
    with tempfile.TemporaryDirectory() as d:
        tmp = keep or Path(d)
        tmp.mkdir(parents=True, exist_ok=True)
        reference = _run(REFERENCE, 1, args, tmp, run_timeout_s)
        findings = [fairness.examine(f"{REFERENCE} x1", reference, None)]
        for b in _available(distributed):
            findings.append(fairness.examine(f"{b} x2", _run(b, 2, args, tmp, run_timeout_s), reference))
    print(
        f"| backend | max per-step loss difference to single x1 (first {fairness.EARLY_STEPS} steps) | checksum "
        "relative difference | eval count | "
        "verdict |\n|---|---|---|---|---|"
    )
    print("\n".join(_line(f) for f in findings))
    failed = [f for f in findings if not f.ok]
    n_test = reference["dataset"].get("n_test")
    if failed:
        print(
            f"check-task: {task} FAILS the contract: " + " | ".join(f"{f.backend}: {f.problems[0]}" for f in failed),
            file=sys.stderr,
        )
        return 1
    print(
        f"check-task: {task} keeps the contract under {', '.join(f.backend for f in findings)} ({steps} steps, "
        f"every one of the {n_test} test samples evaluated once)"
    )
    return 0
