"""Tasks: a model, its data and its step, knowing nothing about distribution.

The Task protocol (docs/tasks.md for users, docs/architecture.md): build_model, build_optimizer, datasets,
collate, step, evaluate, and optionally build_scheduler, `name` and `defaults` (the options a task sets when the
user leaves them unset). A task class is called with the run's RunConfig. A task must be deterministic given
the seed, so that every rank and every backend starts from the same weights and sees the same data
(`run.py check-task` checks it). The built-in tasks are in TASKS; a user's task is loaded from a module or a
file by `task_class`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from distbench.config import RunConfig
from distbench.data.arrays import collate_tensor_batch
from distbench.errors import UserError


class Task(Protocol):
    """What a task gives the loop (docs/tasks.md): a model, its optimizer, its data and its step; it knows nothing of
    distribution (the backend shards, wraps and exchanges). Built as `Task(cfg)` with the run's RunConfig; `defaults`
    (a class attribute) may set the options the user leaves unset."""

    name: str

    def build_model(self) -> nn.Module:
        """The model, its weights drawn from the seeded global RNG (the same on every rank)."""
        ...

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        """The optimizer of `model`'s parameters (the wrapped model's, as the backend hands it)."""
        ...

    def build_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int, steps_per_epoch: int):
        """Optional: a learning-rate scheduler stepped after every optimizer step (None: a constant rate)."""
        ...

    def datasets(self) -> tuple[Dataset, Dataset, dict] | tuple[Dataset, Dataset]:
        """The training and test sets, the same on every rank, and optionally what they are ({name, source,
        notice?, ...}: the record's `dataset`)."""
        ...

    def collate(self, samples):
        """The batch of a list of samples, as `step` and `evaluate` take it."""
        ...

    def step(self, model: nn.Module, batch) -> torch.Tensor:
        """The mean loss of `batch` (no backward here: the backend runs it its library's way)."""
        ...

    def evaluate(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        """Sums over `batch`: loss_sum, correct and count (float64), summed exactly over every rank's shard."""
        ...

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        """Optional: the submodules a sharding backend shards one by one, inner before outer (none: the root
        alone)."""
        ...


# The built-in tasks; any other `--task` is a user's `package.module:Class` or `path/to/file.py:Class`.
TASKS = {
    "mnist": "distbench.tasks.mnist:MnistTask",
    "bert-sentiment": "distbench.tasks.bert:BertSentimentTask",
    "synthetic-resnet": "distbench.tasks.synthetic:SyntheticResnetTask",
}
REQUIRED = ("build_model", "build_optimizer", "datasets", "collate", "step", "evaluate")  # and optional ones
GENERIC_DEFAULTS = {"epochs": 1, "batch_size": 32}  # for a task whose `defaults` leave them out
EVAL_KEYS = ("loss_sum", "correct", "count")


def shard_units(task: Task, model: nn.Module) -> list[nn.Module]:
    """The submodules a sharding backend shards one by one (Task.shard_units, optional: none, the root alone)."""
    units = getattr(task, "shard_units", None)
    return list(units(model)) if units else []


def shard_unit_names(task: Task, model: nn.Module) -> list[str]:
    """The task's shard units by their names in `model` (named_modules), inner before outer as the task gives them."""
    names = {id(m): name for name, m in model.named_modules()}
    return [names[id(u)] for u in shard_units(task, model)]


def classification_sums(scores: torch.Tensor, labels: torch.Tensor, loss=None) -> dict[str, torch.Tensor]:
    """What `evaluate` returns for a classifier: the summed loss (cross-entropy of logits unless `loss` is given,
    e.g. F.nll_loss for log-probabilities), the correct predictions and the count, in float64."""
    scores = scores.float()
    return {
        "loss_sum": (loss or F.cross_entropy)(scores, labels, reduction="sum").double(),
        "correct": (scores.argmax(dim=1) == labels).sum().double(),
        "count": torch.tensor(float(len(labels)), dtype=torch.float64),
    }


class TensorClassification:
    """`collate`, `step` and `evaluate` of a classifier on (inputs, labels) batches of stacked tensors
    (data.arrays.TensorBatchDataset); `criterion` is its loss: cross-entropy of logits, or F.nll_loss for a model
    that returns log-probabilities."""

    criterion = staticmethod(F.cross_entropy)
    collate = staticmethod(collate_tensor_batch)

    def step(self, model: nn.Module, batch) -> torch.Tensor:
        """The mean loss of one batch."""
        x, y = batch
        return self.criterion(model(x), y)

    def evaluate(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        """The batch's sums (classification_sums)."""
        x, y = batch
        return classification_sums(model(x), y, self.criterion)


def _import_file(path: Path, spec: str):
    if not path.is_file():
        raise UserError(f"--task {spec}: {path} does not exist")
    name = "distbench_user_task_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look the module up by name
    module_spec.loader.exec_module(module)
    return module


def task_class(spec: str) -> type:
    """The class a `--task` names: a built-in name, `package.module:Class` or `path/to/file.py:Class`."""
    target = TASKS.get(spec, spec)
    if ":" not in target:
        raise UserError(
            f"unknown task {spec!r}; choose one of {', '.join(TASKS)}, or give your own as "
            "package.module:Class or path/to/file.py:Class (docs/tasks.md)"
        )
    where, cls_name = target.rsplit(":", 1)
    try:
        if where.endswith(".py") or os.sep in where:
            module = _import_file(Path(where), spec)
        else:
            module = importlib.import_module(where)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a user's module raises on import: one line
        raise UserError(f"--task {spec}: {where} could not be imported: {type(e).__name__}: {e}") from e
    cls = getattr(module, cls_name, None)
    if not isinstance(cls, type):
        raise UserError(f"--task {spec}: {where} has no class {cls_name}")
    return cls


def check_interface(task, spec: str, instance_attributes: tuple[str, ...] = ()) -> None:
    """One line naming what a task (its class, or the built task) lacks of the Task interface; a class is not
    asked for `instance_attributes`, which its constructor may set."""
    missing = [m for m in REQUIRED if m not in instance_attributes and not callable(getattr(task, m, None))]
    if missing:
        raise UserError(
            f"--task {spec} does not satisfy the Task interface (docs/tasks.md): missing {', '.join(missing)}"
        )


def with_defaults(cfg: RunConfig) -> RunConfig:
    """The run's options with those left unset filled from the task class's `defaults`."""
    return cfg.with_task_defaults(**{**GENERIC_DEFAULTS, **getattr(task_class(cfg.task), "defaults", {})})


def load_datasets(task: Task) -> tuple[Dataset, Dataset, dict]:
    """The task's datasets and what they are (a task may return only train and test); any failure of the data
    path (a bad download, an unreadable file) is one line."""
    try:
        out = task.datasets()
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a data source raises, the user gets one line
        detail = " ".join(str(e).split())[:200] or type(e).__name__
        raise UserError(f"the {task.name} data could not be loaded: {type(e).__name__}: {detail}") from e
    train, test, info = out if len(out) == 3 else (*out, {})
    info = {"name": task.name, "source": "the task's own", **info, "n_train": len(train), "n_test": len(test)}
    return train, test, info


def build_task(cfg: RunConfig) -> Task:
    """The task of `cfg.task`, built with the run's (defaulted) config and checked against the interface."""
    cls = task_class(cfg.task)
    check_interface(
        cls, cfg.task, instance_attributes=("collate",)
    )  # before building: a task may set these in __init__
    try:
        task = cls(with_defaults(cfg))
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - a user's constructor: one line, not a traceback
        raise UserError(f"--task {cfg.task}: {cls.__name__}(cfg) failed: {type(e).__name__}: {e}") from e
    check_interface(task, cfg.task)
    if not isinstance(getattr(task, "name", None), str):
        task.name = type(task).__name__
    return task
