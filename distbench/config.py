"""Frozen run configuration: one field per CLI option, validated before any process group starts."""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass, replace
from enum import Enum
from pathlib import Path

from backends import NAMES
from distbench.errors import UserError

BackendName = Enum("BackendName", {name: name for name in NAMES}, type=str)  # the registry's names, for typer


class Precision(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"


class GradCompression(str, Enum):
    """How gradients travel between processes: as they are, or cast to 16 bits by the library's own mechanism
    (DDP communication hooks, Horovod compressors)."""

    none = "none"
    fp16 = "fp16"
    bf16 = "bf16"


@dataclass(frozen=True)
class RunConfig:
    backend: str = "single"
    task: str = "mnist"
    epochs: int | None = None  # None: the task's default
    max_steps: int | None = None  # stop after this many global steps (all epochs together)
    batch_size: int | None = None  # global batch, split evenly across processes
    lr: float | None = None
    seed: int = 0
    dropout: float | None = None  # overrides the task's dropout probabilities; 0 turns dropout off
    data_dir: Path | None = None
    model: str | None = (
        None  # bert-sentiment: Hugging Face id, local path, or "tiny-random"; synthetic-resnet: resnet50/18
    )
    max_length: int = 128
    image_size: int = 224  # synthetic-resnet: the side of the square random images
    precision: str = "fp32"
    accumulate: int = 1  # micro-batches per optimizer step; the global batch stays batch_size
    grad_compression: str = "none"  # none, fp16, bf16: the gradients' type on the wire
    warmup_ratio: float = 0.1  # bert-sentiment: linear warm-up over this fraction of steps, then linear decay
    schedule: bool | None = None  # linear warm-up/decay schedule (None: the task's default, on for bert)
    max_grad_norm: float | None = None  # clip gradients to this norm; 0: no clipping (None: the task's default)
    head_lr: float | None = None  # bert-sentiment: learning rate of the pooler and classifier (None: --lr)
    output: Path = Path("results/runs.jsonl")
    force: bool = False
    threads: int | None = None  # intra-op threads per process; None: usable CPUs / local processes
    pin_cores: bool = True  # CPU, several processes per machine: each computes on its own cores
    log_every: int = 10
    progress: bool = True
    eval_batch_size: int = 256
    timeout_s: int = 300
    target_accuracy: float | None = None
    checkpoint_dir: Path | None = None  # resume automatically when it holds a checkpoint
    checkpoint_every: int = 100  # global steps

    def with_task_defaults(self, **defaults) -> RunConfig:
        """Fill the options left unset (None) with the task's defaults."""
        return replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})

    @property
    def clip_norm(self) -> float | None:
        """The norm to clip gradients to, or None: no clipping (--max-grad-norm 0, or unset with no default)."""
        return self.max_grad_norm or None

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, Path):
                d[k] = str(v)
        return d


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (taskset, a cgroup cpuset, Slurm), not the
    machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_threads(local_world_size: int) -> int:
    """The CPUs this process may use divided among the processes of this machine, at least one each."""
    return max(1, available_cpus() // max(1, local_world_size))


def check_output_writable(path: Path, is_main: bool = True) -> None:
    """Create the record's folder and write a scratch file there now, so that a run cannot train to its
    end and then fail to keep its result. Only the main process writes the record, so only it checks."""
    if not is_main:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is read-only")
    except OSError as e:
        raise UserError(f"--output {path} cannot be written ({e.strerror or e})") from e


def validate(cfg: RunConfig, world_size: int) -> None:
    """Reject bad input with one clear line before any process group or data loading starts."""
    if cfg.epochs is not None and cfg.epochs <= 0:
        raise UserError(f"--epochs must be positive, got {cfg.epochs}")
    if cfg.max_steps is not None and cfg.max_steps <= 0:
        raise UserError(f"--max-steps must be positive, got {cfg.max_steps}")
    if cfg.accumulate <= 0:
        raise UserError(f"--accumulate must be positive, got {cfg.accumulate}")
    if cfg.batch_size is not None:
        if cfg.batch_size <= 0:
            raise UserError(f"--batch-size must be positive, got {cfg.batch_size}")
        if cfg.batch_size % world_size:
            raise UserError(
                f"--batch-size {cfg.batch_size} is the global batch and must divide evenly across "
                f"{world_size} processes"
            )
        if cfg.batch_size % (world_size * cfg.accumulate):
            raise UserError(
                f"--batch-size {cfg.batch_size} with --accumulate {cfg.accumulate} on {world_size} processes: each "
                f"process's {cfg.batch_size // world_size} samples per step must split into {cfg.accumulate} "
                "equal micro-batches"
            )
    if cfg.grad_compression != "none" and cfg.backend == "single":
        raise UserError(
            f"--grad-compression {cfg.grad_compression}: the single backend exchanges no gradients; use none"
        )
    if cfg.lr is not None and not cfg.lr > 0:
        raise UserError(f"--lr must be positive, got {cfg.lr}")
    if cfg.dropout is not None and not 0.0 <= cfg.dropout < 1.0:
        raise UserError(f"--dropout must be in [0, 1), got {cfg.dropout}")
    if cfg.data_dir is not None:
        if not cfg.data_dir.exists():
            raise UserError(f"--data-dir {cfg.data_dir} does not exist")
        if not cfg.data_dir.is_dir():
            raise UserError(f"--data-dir {cfg.data_dir} is not a directory")
    if not 32 <= cfg.image_size <= 1024:
        raise UserError(f"--image-size must be between 32 and 1024, got {cfg.image_size}")
    if not 8 <= cfg.max_length <= 512:
        raise UserError(f"--max-length must be between 8 and 512, got {cfg.max_length}")
    if not 0.0 <= cfg.warmup_ratio < 1.0:
        raise UserError(f"--warmup-ratio must be in [0, 1), got {cfg.warmup_ratio}")
    if cfg.head_lr is not None and not cfg.head_lr > 0:
        raise UserError(f"--head-lr must be positive, got {cfg.head_lr}")
    if cfg.max_grad_norm is not None and not cfg.max_grad_norm >= 0:
        raise UserError(f"--max-grad-norm must be positive (or 0: no clipping), got {cfg.max_grad_norm}")
    if cfg.threads is not None and cfg.threads <= 0:
        raise UserError(f"--threads must be positive, got {cfg.threads}")
    if cfg.log_every <= 0:
        raise UserError(f"--log-every must be positive, got {cfg.log_every}")
    if cfg.eval_batch_size <= 0:
        raise UserError(f"--eval-batch-size must be positive, got {cfg.eval_batch_size}")
    if cfg.timeout_s <= 0:
        raise UserError(f"--timeout-s must be positive, got {cfg.timeout_s}")
    if cfg.target_accuracy is not None and not 0.0 < cfg.target_accuracy <= 1.0:
        raise UserError(f"--target-accuracy must be in (0, 1], got {cfg.target_accuracy}")
    if cfg.checkpoint_every <= 0:
        raise UserError(f"--checkpoint-every must be positive, got {cfg.checkpoint_every}")
    if cfg.checkpoint_dir is not None and cfg.checkpoint_dir.exists() and not cfg.checkpoint_dir.is_dir():
        raise UserError(f"--checkpoint-dir {cfg.checkpoint_dir} is not a directory")
    out = cfg.output
    if out.suffix not in (".json", ".jsonl"):
        raise UserError(f"--output must end in .json (one record) or .jsonl (records appended), got {out}")
    if out.exists() and out.is_dir():
        raise UserError(f"--output {out} is a directory")
    if out.suffix == ".json" and out.exists() and not cfg.force:
        raise UserError(f"--output {out} exists; pass --force to overwrite it or use a .jsonl file to append")
