"""The run's options, each declared once: RunConfig's fields are the command line.

Each field of `RunConfig` is one option of `run.py` (after torchtitan's config-as-CLI). Its declaration, made with
`option(...)`, holds everything else that follows from it:

- the default, the help text and the flag (`--max-steps`, or a `--x/--no-x` pair for a switch); the CLI
  (distbench/cli/) builds `run.py`'s options from these, with each task's own default added to the help of the
  options a task may set (`task_default`);
- its checks (`checks`): validated before any process group starts, one line naming the flag on failure;
- whether a resumed run must match the checkpoint on it (`resume`);
- what a sweep does with it (`sweep`): FORWARD to every run of the sweep as `compare` was given it, AXIS (a sweep
  axis: compare takes a list and runs each value; the axis, sweep/configuration.py, names this option and takes its
  flag, choices, checks and help from here), or SET by the sweep itself for each run;
- `choices`: the closed set of its values (an Enum), which the CLI and an axis's parser offer and check.

The README's option table is checked against these declarations (tests/unit/test_options.py).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from distbench.errors import UserError

# what a sweep does with an option
FORWARD, AXIS, SET = "forward", "axis", "set"


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
class Check:
    """A condition on one option's value (None, meaning "the task's default", always passes), and what a value that
    fails it is told: "{flag} {says}, got {value}"."""

    holds: Callable[[Any], bool]
    says: str

    def error(self, flag: str, value) -> str | None:
        if value is None or self.holds(value):
            return None
        return f"{flag} {self.says}, got {value}"


# --fault's values (the injection and what a fault cost: training/faults.py)
NO_FAULT = "none"
FAULT_FORMS = (
    "none, kill:RANK@STEP, kill-node:NODE@STEP[:BACK], hang:RANK@STEP, slow:RANK:FACTOR (FACTOR above 1) or "
    "link-down:NODE@STEP:SECONDS"
)
NODE_FAULTS = ("kill-node", "link-down")  # a fault of a node (every process of it, or its link), not of one rank
_AT_STEP = re.compile(r"(kill|kill-node|hang):(\d+)@(\d+)")
_SLOW = re.compile(r"slow:(\d+):(\d+(?:\.\d+)?)")
_LINK_DOWN = re.compile(r"link-down:(\d+)@(\d+):(\d+(?:\.\d+)?)")
_NODE_BACK = re.compile(r"kill-node:(\d+)@(\d+):(\d+(?:\.\d+)?)")  # a lost node that comes back BACK s later


@dataclass(frozen=True)
class Fault:
    """One `--fault`, parsed."""

    kind: str  # kill, kill-node, hang, slow, link-down
    rank: int  # the rank it happens on; kill-node, link-down (NODE_FAULTS): the node
    step: int = 0  # kill, kill-node, hang, link-down: after this global step
    factor: float = 1.0  # slow: how much longer the rank computes
    seconds: float = 0.0  # link-down: how long the node's link stays down; kill-node: when it comes back (0: never)

    @property
    def of_node(self) -> bool:
        return self.kind in NODE_FAULTS

    @property
    def returns(self) -> bool:
        """A lost node that comes back (kill-node:NODE@STEP:BACK): the job may grow again."""
        return self.kind == "kill-node" and self.seconds > 0

    def beyond(self, text: str, nodes: int) -> str | None:
        """Why this fault (`text`, as given) names a node that a job of `nodes` nodes lacks; None where it does not."""
        if self.of_node and self.rank >= nodes:
            return f"--fault {text}: node {self.rank}, but the job has nodes 0 to {nodes - 1}"
        return None


def parse_fault(text: str | None) -> Fault | None:
    """The fault `text` names; None for none; ValueError for a text of no form."""
    if text is None or text == NO_FAULT:
        return None
    if (m := _AT_STEP.fullmatch(text)) and int(m[3]) >= 1:
        return Fault(m[1], int(m[2]), step=int(m[3]))
    if (m := _SLOW.fullmatch(text)) and float(m[2]) > 1.0:
        return Fault("slow", int(m[1]), factor=float(m[2]))
    if (m := _LINK_DOWN.fullmatch(text)) and int(m[2]) >= 1 and float(m[3]) > 0:
        return Fault("link-down", int(m[1]), step=int(m[2]), seconds=float(m[3]))
    if (m := _NODE_BACK.fullmatch(text)) and int(m[2]) >= 1 and float(m[3]) > 0:
        return Fault("kill-node", int(m[1]), step=int(m[2]), seconds=float(m[3]))
    raise ValueError(text)


def _fault_formed(text: str) -> bool:
    try:
        parse_fault(text)
    except ValueError:
        return False
    return True


POSITIVE = Check(lambda v: v > 0, "must be positive")


def in_range(lo: float, hi: float, *, closed_hi: bool = False) -> Check:
    if closed_hi:
        return Check(lambda v: lo <= v <= hi, f"must be between {lo} and {hi}")
    return Check(lambda v: lo <= v < hi, f"must be in [{lo}, {hi})")


def option(
    default,
    help: str,
    *,
    flag: str | None = None,
    checks: tuple[Check, ...] = (),
    resume: bool = False,
    sweep: str = FORWARD,
    task_default: bool = False,
    unset: str = "none",
    choices: type[Enum] | None = None,
) -> Any:
    """A RunConfig field with its declaration (see the module docstring). `unset`: how the help shows a task default
    of None (for `task_default` options); `choices`: the closed set of its values, if it has one."""
    meta = {
        "choices": choices,
        "help": help,
        "flag": flag,
        "checks": checks,
        "resume": resume,
        "sweep": sweep,
        "task_default": task_default,
        "unset": unset,
    }
    return field(default=default, metadata=meta)


TASK_HELP = (
    "Task to train: mnist, bert-sentiment, synthetic-resnet, or your own as package.module:Class or "
    "path/to/file.py:Class (docs/tasks.md)."
)


@dataclass(frozen=True)
class RunConfig:
    backend: str = option("single", "Data-parallel backend.", sweep=AXIS)
    task: str = option("mnist", TASK_HELP, resume=True)
    epochs: int | None = option(None, "Epochs.", checks=(POSITIVE,), task_default=True)
    max_steps: int | None = option(None, "Stop after this many global steps (all epochs together).", checks=(POSITIVE,))
    batch_size: int | None = option(
        None, "GLOBAL batch size, split evenly across processes.", checks=(POSITIVE,), resume=True, task_default=True
    )
    lr: float | None = option(None, "Learning rate.", checks=(POSITIVE,), resume=True, task_default=True)
    seed: int = option(0, "Seed of weights and data order (the same on every rank).", resume=True)
    dropout: float | None = option(
        None,
        "Override the task's dropout probabilities; 0 turns dropout off.",
        checks=(in_range(0.0, 1.0),),
        resume=True,
        task_default=True,
        unset="the model's",
    )
    data_dir: Path | None = option(None, "Dataset folder (MNIST IDX files or rt-polarity.pos/.neg).")
    model: str | None = option(
        None,
        "bert-sentiment: Hugging Face id or local path (default: bundled MiniLM-L6); "
        "synthetic-resnet: resnet50 (default) or resnet18.",
        resume=True,
    )
    max_length: int = option(
        128,
        "bert-sentiment: truncate sentences to this many tokens.",
        checks=(in_range(8, 512, closed_hi=True),),
        resume=True,
    )
    image_size: int = option(
        224, "synthetic-resnet: side of the random square images.", checks=(in_range(32, 1024, closed_hi=True),)
    )
    precision: str = option("fp32", "fp32, or bf16 autocast.", resume=True, choices=Precision)
    accumulate: int = option(
        1,
        "Micro-batches per optimizer step (the global batch stays --batch-size), through "
        "each library's own mechanism: DDP no_sync, Accelerate accumulate, Horovod "
        "backward_passes_per_step.",
        checks=(POSITIVE,),
        resume=True,
        sweep=AXIS,
    )
    grad_compression: str = option(
        "none",
        "Gradients on the wire: none, or fp16/bf16 through DDP comm hooks (ddp, accelerate) or Horovod's compression.",
        resume=True,
        sweep=AXIS,
        choices=GradCompression,
    )
    zero_stage: int = option(
        0,
        "DeepSpeed's ZeRO stage (deepspeed, accelerate-deepspeed): 0 replicates like DDP, 1 partitions the "
        "optimizer state, 2 the gradients too, 3 the parameters too.",
        checks=(in_range(0, 3, closed_hi=True),),
        resume=True,
        sweep=AXIS,
    )
    schedule: bool | None = option(
        None,
        "Linear warm-up/decay learning-rate schedule.",
        flag="--schedule/--no-schedule",
        resume=True,
        task_default=True,
        unset="off",
    )
    max_grad_norm: float | None = option(
        None,
        "Clip gradients to this norm; 0: no clipping.",
        checks=(Check(lambda v: v >= 0, "must be positive (or 0: no clipping)"),),
        resume=True,
        task_default=True,
    )
    warmup_ratio: float = option(
        0.1, "Fraction of steps to warm up over (with --schedule).", checks=(in_range(0.0, 1.0),), resume=True
    )
    head_lr: float | None = option(
        None,
        "bert-sentiment: learning rate of the new head (pooler + classifier).",
        checks=(POSITIVE,),
        resume=True,
        task_default=True,
        unset="--lr",
    )
    output: Path = option(Path("results/runs.jsonl"), ".jsonl: append the record; .json: write one record.", sweep=SET)
    force: bool = option(False, "Allow overwriting an existing .json --output.", sweep=SET)
    threads: int | None = option(
        None, "Intra-op threads per process (default: usable CPUs / processes).", checks=(POSITIVE,), sweep=AXIS
    )
    pin_cores: bool = option(
        True, "CPU, several processes: pin each to its own block of cores.", flag="--pin-cores/--no-pin-cores"
    )
    log_every: int = option(10, "Update the progress bar every N steps.", checks=(POSITIVE,), sweep=SET)
    progress: bool = option(True, "Progress bar on the main process.", flag="--progress/--no-progress", sweep=SET)
    eval_batch_size: int = option(256, "Per-process evaluation batch size.", checks=(POSITIVE,))
    loader_workers: int = option(
        0,
        "Data-loading worker processes per process (DataLoader's num_workers; 0: the training process loads, as on "
        "a CPU node, where workers would take cores from the step). On a GPU, workers take the loading off the step.",
        checks=(in_range(0, 64, closed_hi=True),),
    )
    timeout_s: int = option(300, "Collective/rendezvous timeout: a dead rank stops the rest.", checks=(POSITIVE,))
    fault: str = option(
        NO_FAULT,
        "Inject a fault, once per run (training/faults.py): kill:RANK@STEP (the rank SIGKILLs itself after that "
        "step), kill-node:NODE@STEP[:BACK] (every process of the node, its launcher's agent too; with BACK, the node "
        "comes back BACK seconds later: compare --restarts starts it again, or lists it again in Horovod Elastic's "
        "discovery), hang:RANK@STEP (it stops "
        "at that step, alive: only --timeout-s tells the others), slow:RANK:FACTOR "
        "(a straggler, computing FACTOR times as long), link-down:NODE@STEP:SECONDS (the node's link down after "
        "that step, up again SECONDS later: per-node links only). With --checkpoint-dir, the record says what it "
        "cost.",
        checks=(Check(_fault_formed, f"must be {FAULT_FORMS}"),),
        sweep=AXIS,
    )
    target_accuracy: float | None = option(
        None,
        "Evaluate every epoch and record the time to reach this accuracy.",
        checks=(Check(lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),),
    )
    peak_tflops: float | None = option(
        None,
        "Each device's peak TFLOP/s at the run's precision, for MFU (default: a table of known GPUs; else unknown).",
        checks=(POSITIVE,),
    )
    emulate: Path | None = option(
        None,
        "Emulate the task's computation from a profile (`run.py profile`, measured on the device to emulate): the "
        "real model's parameters, each module's forward and backward a wait of its profiled time; the library's "
        "communication runs for real. Reports no accuracy (docs/emulation.md).",
        resume=True,
    )
    dilation: float = option(
        1.0,
        "With --emulate (and in commbench, which computes nothing): every wait K times longer and the link K times "
        "slower (simulate, compare and commbench shape it at rate / K), so that the host carries the traffic of more "
        "nodes at the same ratios; times are recorded divided back by K, as measured under `dilated`.",
        checks=(Check(lambda v: 1.0 <= v <= 1000.0, "must be between 1 and 1000"),),
        resume=True,
    )
    checkpoint_dir: Path | None = option(
        None, "Save checkpoints here; a run resumes from the one it finds there.", sweep=SET
    )
    checkpoint_every: int = option(100, "Checkpoint every N global steps.", checks=(POSITIVE,))
    commit_every: int | None = option(
        None,
        "Horovod Elastic (horovodrun --min-np/--max-np): commit the state it rolls back to every N global steps "
        "(default: --checkpoint-every, so that it redoes as many steps as a library restarted from its checkpoint).",
        checks=(POSITIVE,),
    )

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

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        """The inverse of to_dict (a record's "config"): paths are paths again; keys it does not know are left out."""
        paths = {name for name, f in FIELDS.items() if "Path" in str(f.type)}
        return cls(**{k: Path(v) if k in paths and v is not None else v for k, v in d.items() if k in FIELDS})


def flag(name: str) -> str:
    """The option's flag as a user types it: --max-steps (a switch: its --x form)."""
    declared = FIELDS[name].metadata["flag"]
    return declared.split("/")[0] if declared else "--" + name.replace("_", "-")


FIELDS = {f.name: f for f in fields(RunConfig)}
RESUME_MUST_MATCH = tuple(name for name, f in FIELDS.items() if f.metadata["resume"])
FORWARDED = tuple(name for name, f in FIELDS.items() if f.metadata["sweep"] == FORWARD)
TASK_DEFAULTED = tuple(name for name, f in FIELDS.items() if f.metadata["task_default"])
DEFAULTS = {name: f.default for name, f in FIELDS.items() if f.default is not MISSING}


def to_args(values: dict) -> list[str]:
    """`run.py` options that give these values (a value left at None, the task's or RunConfig's default, is left
    out): the form a sweep forwards options in."""
    args: list[str] = []
    for name, value in values.items():
        if value is None:
            continue
        declared = FIELDS[name].metadata["flag"]
        if isinstance(value, bool) and declared:
            on, off = declared.split("/")
            args.append(on if value else off)
        else:
            args += [flag(name), str(value.value if isinstance(value, Enum) else value)]
    return args


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
        raise UserError(f"{flag('output')} {path} cannot be written ({e.strerror or e})") from e


def check_dir_option(name: str, path: Path | None) -> None:
    """A folder option (--data-dir) names a folder that is there."""
    if path is None:
        return
    if not path.exists():
        raise UserError(f"{flag(name)} {path} does not exist")
    if not path.is_dir():
        raise UserError(f"{flag(name)} {path} is not a directory")


def checked(name: str, value):
    """One option's value through its own checks (a command that takes the option without a RunConfig: commbench's
    --dilation); the first it fails is one line naming the flag."""
    for check in FIELDS[name].metadata["checks"]:
        if (error := check.error(flag(name), value)) is not None:
            raise UserError(error)
    return value


def validate(cfg: RunConfig, world_size: int) -> None:
    """Reject bad input with one clear line before any process group or data loading starts: each option's own
    checks, then the checks that relate options to each other or to the world size (what an option means to a
    backend: BackendSpec.check_options)."""
    for name in FIELDS:
        checked(name, getattr(cfg, name))
    _check_batch(cfg, world_size)
    check_dir_option("data_dir", cfg.data_dir)
    _check_fault(cfg.fault, world_size)
    if cfg.dilation != 1.0 and cfg.emulate is None:
        raise UserError(f"--dilation {cfg.dilation:g} stretches an emulated run's waits: give --emulate PROFILE too")
    if cfg.checkpoint_dir is not None and cfg.checkpoint_dir.exists() and not cfg.checkpoint_dir.is_dir():
        raise UserError(f"--checkpoint-dir {cfg.checkpoint_dir} is not a directory")
    _check_output(cfg.output, cfg.force)


def _check_fault(text: str | None, world_size: int) -> None:
    """A fault on a rank the job has."""
    fault = parse_fault(text)
    if fault is not None and not fault.of_node and fault.rank >= world_size:
        raise UserError(f"--fault {text}: rank {fault.rank}, but the job has ranks 0 to {world_size - 1}")


def _check_batch(cfg: RunConfig, world_size: int) -> None:
    if cfg.batch_size is None:
        return
    if cfg.batch_size % world_size:
        raise UserError(
            f"--batch-size {cfg.batch_size} is the global batch and must divide evenly across {world_size} processes"
        )
    if cfg.batch_size % (world_size * cfg.accumulate):
        raise UserError(
            f"--batch-size {cfg.batch_size} with --accumulate {cfg.accumulate} on {world_size} processes: "
            f"each process's {cfg.batch_size // world_size} samples per step must split into "
            f"{cfg.accumulate} equal micro-batches"
        )


def _check_output(out: Path, force: bool) -> None:
    if out.suffix not in (".json", ".jsonl"):
        raise UserError(f"--output must end in .json (one record) or .jsonl (records appended), got {out}")
    if out.exists() and out.is_dir():
        raise UserError(f"--output {out} is a directory")
    if out.suffix == ".json" and out.exists() and not force:
        raise UserError(f"--output {out} exists; pass --force to overwrite it or use a .jsonl file to append")
