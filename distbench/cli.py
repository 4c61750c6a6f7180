"""Command line: `run.py [train options]`, `run.py compare ...`, `run.py simulate ...`, `run.py report DIR`,
`run.py check-task TASK`.

Each option maps one to one onto a RunConfig field. Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import click
import typer

from backends import launch_help
from distbench.config import BackendName, GradCompression, Precision, RunConfig
from distbench.errors import UserError

LAUNCH_HELP = (
    launch_help()
    + "\nOther commands: `run.py compare --help` (run the backend x world-size matrix; --nodes, --link-rate), "
    "`run.py simulate --help` (one job as simulated nodes, optionally over a shaped link), `run.py report DIR`, "
    "`run.py check-task TASK` (does a task, e.g. your own, keep the fairness contract under every backend?).\n"
)

TASK_HELP = (
    "Task to train: mnist, bert-sentiment, synthetic-resnet, or your own as package.module:Class or "
    "path/to/file.py:Class (docs/tasks.md)."
)

train_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@train_app.command(
    help="Train one task under one data-parallel backend and write a results record.", epilog=LAUNCH_HELP
)
def train(
    backend: Annotated[BackendName, typer.Option(help="Data-parallel backend.")] = BackendName.single,
    task: Annotated[str, typer.Option(help=TASK_HELP)] = "mnist",
    epochs: Annotated[int | None, typer.Option(help="Epochs (default: mnist 5, bert-sentiment 1).")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many global steps.")] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="GLOBAL batch size, split evenly across processes (mnist 64, bert 32).")
    ] = None,
    lr: Annotated[float | None, typer.Option(help="Learning rate (mnist Adadelta 0.5, bert AdamW 1e-4).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of weights and data order (the same on every rank).")] = 0,
    dropout: Annotated[
        float | None,
        typer.Option(help="Override the task's dropout probabilities; 0 turns dropout off (bert default: 0)."),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Dataset folder (MNIST IDX files or rt-polarity.pos/.neg).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="bert-sentiment: Hugging Face id or local path (default: bundled MiniLM-L6); "
            "synthetic-resnet: resnet50 (default) or resnet18."
        ),
    ] = None,
    max_length: Annotated[int, typer.Option(help="bert-sentiment: truncate sentences to this many tokens.")] = 128,
    image_size: Annotated[int, typer.Option(help="synthetic-resnet: side of the random square images.")] = 224,
    precision: Annotated[Precision, typer.Option(help="fp32, or bf16 autocast.")] = Precision.fp32,
    accumulate: Annotated[
        int,
        typer.Option(
            help="Micro-batches per optimizer step (the global batch stays --batch-size), through each "
            "library's own mechanism: DDP no_sync, Accelerate accumulate, Horovod backward_passes_per_step."
        ),
    ] = 1,
    grad_compression: Annotated[
        GradCompression,
        typer.Option(
            help="Gradients on the wire: none, or fp16/bf16 through DDP comm hooks (ddp, accelerate) "
            "or Horovod's compression."
        ),
    ] = GradCompression.none,
    schedule: Annotated[
        bool | None,
        typer.Option("--schedule/--no-schedule", help="bert-sentiment: linear warm-up/decay schedule (default on)."),
    ] = None,
    max_grad_norm: Annotated[
        float | None,
        typer.Option(help="Clip gradients to this norm; 0: no clipping (default: bert-sentiment 1.0, mnist none)."),
    ] = None,
    warmup_ratio: Annotated[float, typer.Option(help="Fraction of steps to warm up over (with --schedule).")] = 0.1,
    head_lr: Annotated[
        float | None,
        typer.Option(help="bert-sentiment: learning rate of the new head (pooler + classifier; default 1e-3)."),
    ] = None,
    output: Annotated[Path, typer.Option(help=".jsonl: append the record; .json: write one record.")] = Path(
        "results/runs.jsonl"
    ),
    force: Annotated[bool, typer.Option(help="Allow overwriting an existing .json --output.")] = False,
    threads: Annotated[
        int | None, typer.Option(help="Intra-op threads per process (default: usable CPUs / processes).")
    ] = None,
    pin_cores: Annotated[
        bool,
        typer.Option("--pin-cores/--no-pin-cores", help="CPU, several processes: pin each to its own block of cores."),
    ] = True,
    log_every: Annotated[int, typer.Option(help="Update the progress bar every N steps.")] = 10,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Progress bar on the main process.")
    ] = True,
    eval_batch_size: Annotated[int, typer.Option(help="Per-process evaluation batch size.")] = 256,
    timeout_s: Annotated[int, typer.Option(help="Collective/rendezvous timeout: a dead rank stops the rest.")] = 300,
    target_accuracy: Annotated[
        float | None, typer.Option(help="Evaluate every epoch and record the time to reach this accuracy.")
    ] = None,
    checkpoint_dir: Annotated[
        Path | None, typer.Option(help="Save checkpoints here; a run resumes from the one it finds there.")
    ] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every N global steps.")] = 100,
) -> None:
    cfg = RunConfig(
        backend=backend.value, task=task, epochs=epochs, max_steps=max_steps, batch_size=batch_size, lr=lr,
        seed=seed, dropout=dropout, data_dir=data_dir, model=model, max_length=max_length, image_size=image_size, precision=precision.value,
        accumulate=accumulate, grad_compression=grad_compression.value,
        schedule=schedule, max_grad_norm=max_grad_norm, warmup_ratio=warmup_ratio, head_lr=head_lr, output=output, force=force, threads=threads,
        pin_cores=pin_cores,
        log_every=log_every, progress=progress, eval_batch_size=eval_batch_size, timeout_s=timeout_s,
        target_accuracy=target_accuracy, checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
    )  # fmt: skip
    from distbench.loop import run

    run(cfg)


def _invoke(app: typer.Typer, args: list[str], prog: str) -> int:
    # typer >= 0.20 vendors click: its exceptions are typer's, not the click package's.
    exit_types = (typer.Exit, click.exceptions.Exit)
    usage_types = (typer.TyperException, click.ClickException)
    try:
        # without standalone mode, click returns an Exit's code (e.g. 130 after Ctrl-C) instead of raising
        rv = app(args=args, prog_name=prog, standalone_mode=False)
    except exit_types as e:  # --help
        return e.exit_code
    except (typer.Abort, click.exceptions.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        return 130
    except usage_types as e:  # bad option or value: one line, not a usage box
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        return 2
    except UserError as e:
        from distbench import launch

        if launch.current().is_main:
            print(f"error: {e}", file=sys.stderr, flush=True)
        else:
            # Every rank usually meets the same bad input at once. A launcher tears the job down when the first
            # process exits (horovodrun kills the rest), which could cut the main process's line short; the
            # others leave a moment later.
            time.sleep(2)
        _record_for_torchrun(f"error: {e}")
        return e.exit_code
    return rv if isinstance(rv, int) else 0


def _record_for_torchrun(line: str) -> None:
    """torchrun (and accelerate launch, which runs its agent) reads a failed worker's error file
    (TORCHELASTIC_ERROR_FILE) for the root cause of its failure summary; without one it says only
    "To enable traceback see ...". The message goes there without a traceback: it is the one line."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"message": {"message": line, "extraInfo": {"timestamp": str(int(time.time()))}}}, f)
    except OSError:
        pass  # the summary is then torchrun's default; the line is on stderr all the same


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tokenizers' threads fight torch's for 2 cores
    if argv and argv[0] == "check-task":
        from distbench.checktask import check_app

        return _invoke(check_app, argv[1:], "run.py check-task")
    if argv and argv[0] in ("compare", "report", "simulate"):
        from distbench.compare import compare_app

        return _invoke(compare_app, argv, "run.py")
    return _invoke(train_app, argv, "run.py")
