"""Checkpoints: everything needed to continue a run exactly, written atomically by the main process.

A checkpoint (`Checkpoint`, the one schema: the loop writes one and reads one back) holds the model and optimizer
state as whole tensors (or, where a library checkpoints itself, as DeepSpeed's save_checkpoint does with each rank's
ZeRO partition, the tag of that checkpoint beside this file: `library`), the scheduler state, the data position
(global step; epoch and step within it follow from the steps per epoch), every rank's generator states (CPU and
device, see distbench/training/rng.py), the loss history so far and the config. It is read with
`torch.load(weights_only=True)`: no pickled code is run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from distbench.config import RESUME_MUST_MATCH, RunConfig, flag
from distbench.errors import UserError

FILENAME = "checkpoint.pt"
_DEFAULTS = RunConfig().to_dict()
FORMAT = 3  # 3: "library"; 2 (still read): no library checkpoint; 1 (still read): "rng" holds the CPU states alone


@dataclass
class Checkpoint:
    """What a checkpoint holds; saved as a dict of these fields and "format"."""

    step: int  # global steps done
    world_size: int
    model: dict  # the unwrapped model's state dict
    optimizer: dict
    scheduler: dict | None
    rng: dict[str, torch.Tensor]  # every rank's generator states, stacked in rank order (rng.gather)
    loss_history: torch.Tensor  # float64, the global mean loss of every step so far
    config: dict  # the run's RunConfig as a dict
    # where the library wrote the model and optimizer itself (then `model` and `optimizer` are empty):
    # {"name": "deepspeed", "tag": "step10"}, its checkpoint being in the folder DIRECTORY/NAME/TAG
    library: dict | None = None

    def state(self) -> dict:
        return {"format": FORMAT, **{f.name: getattr(self, f.name) for f in fields(self)}}


def path_in(directory: Path) -> Path:
    return directory / FILENAME


def save(ckpt: Checkpoint, path: Path) -> None:
    """Write to a temporary file in the same folder, fsync, then rename: never a half-written checkpoint."""
    state = ckpt.state()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".checkpoint-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def library_dir(directory: Path, library: str) -> Path:
    """Where a library's own checkpoints are kept beside checkpoint.pt (one folder per tag in it)."""
    return directory / library


def prune_library(folder: Path, keep: str) -> None:
    """Remove a library's older checkpoints from `folder`, once checkpoint.pt names the newer one `keep`."""
    for old in folder.iterdir():
        if old.is_dir() and old.name != keep:
            shutil.rmtree(old, ignore_errors=True)


def load(path: Path, config: dict, world_size: int, library: str | None = None) -> Checkpoint:
    """Read and check a checkpoint for a run with `config` at `world_size` whose backend writes the library
    checkpoint `library` (None: whole tensors); any problem is one clear line (UserError), the file left as it is.

    A checkpoint of whole tensors may be resumed at another world size: the model, optimizer, step and data order
    are global (the global batch is fixed), so they continue exactly; only the per-rank random streams cannot (see
    Trainer.restore)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, wrong format, disallowed pickle: all "unreadable"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]
        raise UserError(f"checkpoint {path} is corrupt or not a distbench checkpoint ({first[:160]})") from e
    if not isinstance(state, dict) or state.get("format") not in (1, 2, FORMAT):
        raise UserError(f"checkpoint {path} is not a distbench checkpoint (format {FORMAT})")
    if state["format"] == 1:
        state["rng"] = {"cpu": state["rng"]}
    state.setdefault("library", None)
    saved = {**_DEFAULTS, **state["config"]}  # options added later: an older checkpoint ran with their default
    for key in RESUME_MUST_MATCH:
        if saved.get(key) != config.get(key):
            raise UserError(
                f"checkpoint {path} was written with {flag(key)} {saved.get(key)}, this run has "
                f"{config.get(key)}; use another --checkpoint-dir"
            )
    max_steps = config.get("max_steps")
    if max_steps is not None and state["step"] > max_steps:
        raise UserError(
            f"checkpoint {path} is at step {state['step']}, past --max-steps {max_steps}; raise --max-steps or "
            "use another --checkpoint-dir"
        )
    check_library(path, state, world_size, library)
    return Checkpoint(**{f.name: state[f.name] for f in fields(Checkpoint)})


def check_library(path: Path, state: dict, world_size: int, library: str | None) -> None:
    """That a backend resumes the form it writes: whole tensors, or its library's own checkpoint, at the world size
    that wrote it (each rank reads its own partition) or, where the library said it can reshard it, at another."""
    writer, written = state["config"].get("backend"), state["library"]
    if written is None and library is not None:
        raise UserError(
            f"checkpoint {path} holds whole tensors (written by --backend {writer}); this backend resumes only its "
            f"library's own checkpoint ({library}); use another --checkpoint-dir"
        )
    if written is not None and written["name"] != library:
        raise UserError(
            f"checkpoint {path} is {written['name']}'s own checkpoint (written by --backend {writer}); resume it "
            f"with --backend {writer}, or use another --checkpoint-dir"
        )
    # written before the library said whether it could reshard: it could not
    why = written.get("not_reshardable", "its library cannot reshard it") if written is not None else None
    if written is not None and state["world_size"] != world_size and why is not None:
        raise UserError(
            f"checkpoint {path} is {written['name']}'s own checkpoint of {state['world_size']} processes, each "
            f"holding its partition; this run has {world_size}, and {why}; run with {state['world_size']} or use "
            "another --checkpoint-dir"
        )
